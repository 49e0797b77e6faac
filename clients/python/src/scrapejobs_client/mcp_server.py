"""``scrapejobs mcp``: an MCP server over stdio, so that an AI assistant uses a team's own
scrapejobs as its fetch tool (FR-51, docs/client.md). Installed with the ``mcp`` extra
(``pip install 'scrapejobs-client[mcp]'``), on the official ``mcp`` SDK; configured as the CLI is,
by SCRAPEJOBS_URL and SCRAPEJOBS_TOKEN (or ``--url`` / ``--token``).

Tools: ``submit_job``, ``submit_crawl``, ``crawl_pages``, ``wait_for_job``, ``read_result``. A result's body is
answered as text up to RESULT_TEXT_MAX_BYTES; a larger one, or one that is not text, is answered
with its signed link instead. Each call makes its own ``AsyncClient``: nothing is held between
calls but the URL and the token. Standard output carries the protocol only."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Literal

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError as exc:  # pragma: no cover - the [mcp] extra is missing
    sys.stderr.write(f"scrapejobs mcp: needs its extra: pip install 'scrapejobs-client[mcp]' ({exc})\n")
    raise SystemExit(2) from exc

from scrapejobs_client import _core
from scrapejobs_client.aio import AsyncClient
from scrapejobs_client.errors import ScrapejobsError, WaitTimeout

# The most body bytes read_result answers as text (stated in its description); larger results are
# answered with their link. A caller may ask for less, never more.
RESULT_TEXT_MAX_BYTES = 100_000
# wait_for_job's longest wait per call; the assistant calls again to wait longer.
WAIT_MAX_S = 300
_TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "application/xhtml+xml")

INSTRUCTIONS = (
    "Fetch web pages through this team's scrapejobs service: submit_job (or submit_crawl for a "
    "site), then wait_for_job with the job's id, then read_result for its text. Jobs run on the "
    "service's workers, politely and with retries; a result stays readable for the service's retention."
)


def _is_text(content_type: str | None) -> bool:
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    return kind.startswith("text/") or kind in _TEXT_TYPES or kind.endswith(("+json", "+xml"))


def _charset(content_type: str | None) -> str:
    for param in (content_type or "").split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return "utf-8"


def _job_summary(job: Any) -> dict[str, Any]:
    summary: dict[str, Any] = {"id": job.id, "status": job.status, "url": job.url, "attempts": job.attempts}
    if job.final_url:
        summary["final_url"] = job.final_url
    if job.last_error is not None:
        summary["last_error"] = job.last_error.raw
    return summary


def build_server(client_factory: Callable[[], AsyncClient]) -> MCPServer:
    """The MCP server and its tools, each call on a client ``client_factory`` makes."""
    server = MCPServer("scrapejobs", instructions=INSTRUCTIONS)

    async def call(fn: Callable[[AsyncClient], Any]) -> Any:
        try:
            async with client_factory() as client:
                return await fn(client)
        except WaitTimeout:
            raise
        except ScrapejobsError as exc:  # the API's refusal, by name, for the assistant to read
            raise ToolError(str(exc)) from exc

    @server.tool()
    async def submit_job(
        url: str,
        render: Literal["none", "browser"] = "none",
        priority: Literal["high", "normal", "low"] = "normal",
        max_age_s: int = 0,
    ) -> dict[str, Any]:
        """Submit one URL to fetch (GET). render="browser" renders the page in a browser first
        (when the service has browsers). max_age_s > 0 accepts a stored result of the same URL up
        to that old instead of fetching again. Returns the job's id and status: pass the id to
        wait_for_job, then read_result."""
        fields: dict[str, Any] = {"priority": priority}
        if render != "none":
            fields["render"] = render
        if max_age_s:
            fields["max_age_s"] = max_age_s
        created = await call(lambda c: c.submit(url, **fields))
        return {"id": created.id, "status": created.status}

    @server.tool()
    async def submit_crawl(url: str, max_pages: int, max_depth: int | None = None) -> dict[str, Any]:
        """Crawl a site from a start URL: follow its links on the same origin, at most max_pages pages
        (the start page included), up to max_depth links deep (the service's default when not
        given). Every page becomes a job: crawl_pages lists them. Returns the crawl's id and status."""
        fields: dict[str, Any] = {} if max_depth is None else {"max_depth": max_depth}
        crawl = await call(lambda c: c.crawl(url, max_pages=max_pages, **fields))
        return {"id": crawl.id, "status": crawl.status, "max_pages": crawl.max_pages}

    @server.tool()
    async def crawl_pages(crawl_id: str, limit: int = 100) -> dict[str, Any]:
        """A crawl's status and its pages so far, newest first (at most limit, up to 500): each
        page's URL, job id and status. Pass a page's job id to wait_for_job and read_result."""
        limit = max(1, min(limit, 500))

        async def read(client: AsyncClient) -> dict[str, Any]:
            crawl = await client.get_crawl(crawl_id)
            pages = []
            async for job in client.jobs(crawl=crawl_id, limit=limit):
                pages.append({"job_id": job.id, "url": job.url, "status": job.status})
                if len(pages) >= limit:
                    break
            return {"id": crawl.id, "status": crawl.status, "counts": crawl.pages, "pages": pages}

        answer: dict[str, Any] = await call(read)
        return answer

    @server.tool()
    async def wait_for_job(job_id: str, timeout_s: int = 120) -> dict[str, Any]:
        """Wait until a job is final (succeeded, failed or cancelled), at most timeout_s seconds
        (up to 300; call again to wait longer). Returns its status, the URL that answered after
        redirects, and its last error when it failed; "final": false when it is not final yet."""
        timeout = max(1, min(timeout_s, WAIT_MAX_S))
        try:
            job = await call(lambda c: c.wait(job_id, timeout=timeout))
        except WaitTimeout as late:
            return {**_job_summary(late.job), "final": False}
        return {**_job_summary(job), "final": True}

    @server.tool(
        description=f"The text of a succeeded job's stored body, when it is text and at most max_bytes "
        f"(at most {RESULT_TEXT_MAX_BYTES:,} bytes, the default); otherwise its size, type and a signed "
        "link to download it, valid until the time stated."
    )
    async def read_result(job_id: str, max_bytes: int = RESULT_TEXT_MAX_BYTES) -> str:
        limit = max(1, min(max_bytes, RESULT_TEXT_MAX_BYTES))

        async def read(client: AsyncClient) -> str:
            meta = await client.result(job_id)
            if meta.size > limit or not _is_text(meta.content_type):
                why = "not text" if not _is_text(meta.content_type) else f"over {limit:,} bytes"
                return (
                    f"The result is {meta.size:,} bytes of {meta.content_type or 'unknown type'} ({why}): "
                    f"download it from {meta.url} (valid until {meta.expires_at})."
                )
            body = await client.result_bytes(job_id)
            return body.decode(_charset(meta.content_type), errors="replace")

        text: str = await call(read)
        return text

    return server


def serve(*, url: str | None = None, token: str | None = None) -> None:
    """Run the server over stdio until its input closes. Raises ValueError without a URL or token."""
    base_url, raw = _core.settings_from_env(url, token)
    build_server(lambda: AsyncClient(base_url, raw)).run("stdio")
