"""The ``scrapejobs`` command line (installed with ``pip install 'scrapejobs-client[cli]'``).

Configured by SCRAPEJOBS_URL and SCRAPEJOBS_TOKEN (or --url / --token). ``--json`` prints the
API's objects as JSON, one per line, for scripts. Exit codes (docs/client.md):

    0  done; with --wait: the job (every job of the batch, every page of the crawl) succeeded
    1  the job failed (a batch: some job failed; a crawl: some page failed)
    2  usage error (a bad option or argument)
    3  the job was cancelled (a batch: some job was cancelled, none failed; a crawl: it was
       cancelled, or some page was, none failed)
    4  timed out waiting (--timeout)
    5  the API refused the request or failed (4xx/5xx, after retries); also a refused row
    6  the service could not be reached
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

try:
    import click
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table
except ImportError as exc:  # pragma: no cover - the [cli] extra is missing
    sys.stderr.write(
        f"scrapejobs: the command line needs its extra: pip install 'scrapejobs-client[cli]' ({exc})\n"
    )
    raise SystemExit(2) from exc

from scrapejobs_client import _core
from scrapejobs_client._base import Model
from scrapejobs_client._models import UsageDay, UsageTotals
from scrapejobs_client.client import Client, TransportFailed
from scrapejobs_client.errors import ApiError, InvalidRequest, WaitTimeout

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CANCELLED, EXIT_TIMEOUT, EXIT_API, EXIT_UNREACHABLE = range(7)
STATUS_EXIT = {"succeeded": EXIT_OK, "failed": EXIT_FAILED, "cancelled": EXIT_CANCELLED}

err = Console(stderr=True)


class Context:
    def __init__(self, url: str | None, token: str | None, as_json: bool, retries: int = 8):
        self.url, self.token, self.as_json, self.retries = url, token, as_json, retries

    def client(self) -> Client:
        try:
            return Client(self.url, self.token, max_retries=self.retries)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc

    def emit(self, obj: Model | dict[str, Any], human: str) -> None:
        if self.as_json:
            click.echo(json.dumps(obj.raw if isinstance(obj, Model) else obj, separators=(",", ":")))
        else:
            click.echo(human)


def _fail(code: int, message: str) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False, markup=True)
    raise SystemExit(code)


def _api_errors(fn: Callable[..., int | None]) -> Callable[..., None]:
    """Run a command; map the client's exceptions to the documented exit codes."""

    def run(*args: Any, **kwargs: Any) -> None:
        try:
            code = fn(*args, **kwargs) or EXIT_OK
        except InvalidRequest as exc:
            _fail(EXIT_USAGE, str(exc))
        except WaitTimeout as exc:
            _fail(EXIT_TIMEOUT, f"timed out: {exc}")
        except TransportFailed as exc:
            _fail(EXIT_UNREACHABLE, f"cannot reach the service: {exc}")
        except ApiError as exc:
            _fail(EXIT_API, str(exc))
        raise SystemExit(code)

    run.__name__, run.__doc__ = fn.__name__, fn.__doc__
    return run


json_option = click.option("--json", "as_json", is_flag=True, default=None, help="Print JSON (for scripts).")


def _ctx(ctx: click.Context, as_json: bool | None) -> Context:
    obj: Context = ctx.ensure_object(Context) if ctx.obj is None else ctx.obj
    if as_json:
        obj.as_json = True
    return obj


@click.group()
@click.option(
    "--url", envvar="SCRAPEJOBS_URL", help="The service, e.g. http://127.0.0.1:8000 [SCRAPEJOBS_URL]."
)
@click.option("--token", envvar="SCRAPEJOBS_TOKEN", help="An API token of your tenant [SCRAPEJOBS_TOKEN].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
@click.option(
    "--retries",
    type=click.IntRange(0, 50),
    default=8,
    show_default=True,
    help="Retries of a dropped connection, a 429 or a 503 before giving up.",
)
@click.pass_context
def main(ctx: click.Context, url: str | None, token: str | None, as_json: bool, retries: int) -> None:
    """scrapejobs: submit scrape jobs, batches and crawls, follow them, fetch their results."""
    ctx.obj = Context(url, token, as_json, retries)


def _job_line(job: Any) -> str:
    error = f"  {job.last_error.class_}: {job.last_error.message}" if job.last_error else ""
    return f"{job.id}  {job.status:<9}  {job.priority:<6}  attempts {job.attempts}/{job.max_attempts}  {job.url}{error}"


@main.command()
@click.argument("url")
@click.option("--wait", is_flag=True, help="Wait until the job is final; the exit code says how it ended.")
@click.option(
    "--timeout", type=float, default=None, help="With --wait: give up after this many seconds (exit 4)."
)
@click.option("--priority", type=click.Choice(["high", "normal", "low"]), default=None)
@click.option(
    "--max-age", "max_age_s", type=int, default=None, help="Reuse an identical fetch this recent (s)."
)
@click.option("--method", type=click.Choice(["GET", "HEAD", "POST"]), default=None)
@click.option("--header", "headers", multiple=True, help="A request header, 'Name: value' (repeatable).")
@click.option("--body", default=None, help="Request body (POST only).")
@click.option("--callback-url", default=None, help="Called (signed) when the job is final.")
@click.option("--max-attempts", type=int, default=None)
@click.option("--timeout-s", "fetch_timeout_s", type=int, default=None, help="Per-attempt fetch timeout (s).")
@json_option
@click.pass_context
@_api_errors
def submit(
    ctx: click.Context, url: str, wait: bool, timeout: float | None, as_json: bool | None, **opts: Any
) -> int:
    """Submit one job."""
    c = _ctx(ctx, as_json)
    fields: dict[str, Any] = {}
    for name in ("priority", "max_age_s", "method", "body", "callback_url", "max_attempts"):
        if opts[name] is not None:
            fields[name] = opts[name]
    if opts["fetch_timeout_s"] is not None:
        fields["timeout_s"] = opts["fetch_timeout_s"]
    if opts["headers"]:
        try:
            fields["headers"] = dict(
                (k.strip(), v.strip()) for k, v in (h.split(":", 1) for h in opts["headers"])
            )
        except ValueError as exc:
            raise click.BadParameter("headers are 'Name: value'", param_hint="--header") from exc
    with c.client() as client:
        created = client.submit(url, **fields)
        if not wait:
            c.emit(created, created.id)
            return EXIT_OK
        job = client.wait(created, timeout=timeout)
        c.emit(job, _job_line(job))
        return STATUS_EXIT[job.status]


@main.command()
@click.argument("job_id")
@click.option("--wait", "wait_s", type=click.IntRange(0, 30), default=0, help="Hold the answer up to N s.")
@json_option
@click.pass_context
@_api_errors
def get(ctx: click.Context, job_id: str, wait_s: int, as_json: bool | None) -> int:
    """Show one job."""
    c = _ctx(ctx, as_json)
    with c.client() as client:
        job = client.get(job_id, wait_s=wait_s or None)
    c.emit(job, _job_line(job))
    return EXIT_OK


@main.command(name="ls")
@click.option(
    "--status", type=click.Choice(sorted(_core.FINAL_STATUSES | {"queued", "running"})), default=None
)
@click.option("--priority", type=click.Choice(["high", "normal", "low"]), default=None)
@click.option("--batch", default=None, help="Jobs of one batch.")
@click.option(
    "--limit", type=click.IntRange(1), default=50, show_default=True, help="Show at most this many."
)
@json_option
@click.pass_context
@_api_errors
def list_jobs(
    ctx: click.Context,
    status: str | None,
    priority: str | None,
    batch: str | None,
    limit: int,
    as_json: bool | None,
) -> int:
    """List jobs, newest first."""
    c = _ctx(ctx, as_json)
    with c.client() as client:
        for n, job in enumerate(
            client.jobs(status=status, priority=priority, batch=batch, limit=min(limit, 500))
        ):
            if n >= limit:
                break
            c.emit(job, _job_line(job))
    return EXIT_OK


@main.command()
@click.argument("job_id")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the body here.",
)
@json_option
@click.pass_context
@_api_errors
def result(ctx: click.Context, job_id: str, output: Path | None, as_json: bool | None) -> int:
    """Download a job's stored body (its SHA-256 checked), or show its metadata."""
    c = _ctx(ctx, as_json)
    with c.client() as client:
        if output is None:
            meta = client.result(job_id)
        else:
            meta = client.download(job_id, output)
    where = f" -> {output}" if output else f"  {meta.url}"
    c.emit(
        meta, f"{meta.size} bytes  sha256 {meta.sha256}  HTTP {meta.http_status}  {meta.content_type}{where}"
    )
    return EXIT_OK


@main.command()
@click.argument("job_id")
@json_option
@click.pass_context
@_api_errors
def cancel(ctx: click.Context, job_id: str, as_json: bool | None) -> int:
    """Cancel a job: a queued one at once, a running one at its worker's next check."""
    c = _ctx(ctx, as_json)
    with c.client() as client:
        answer = client.cancel(job_id)
    c.emit(
        answer, f"{job_id}  {answer.status}" + ("  (cancel requested)" if answer.status == "running" else "")
    )
    return EXIT_OK


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--wait", is_flag=True, help="Wait until every job of the batch is final, with a progress bar.")
@click.option(
    "--timeout", type=float, default=None, help="With --wait: give up after this many seconds (exit 4)."
)
@click.option(
    "--callback-url",
    default=None,
    help="Have the batch announced at this URL (a signed POST, once) when every job of it is final.",
)
@json_option
@click.pass_context
@_api_errors
def batch(
    ctx: click.Context,
    file: Path,
    wait: bool,
    timeout: float | None,
    callback_url: str | None,
    as_json: bool | None,
) -> int:
    """Submit a CSV, JSON-lines or Parquet file of job rows as one batch."""
    c = _ctx(ctx, as_json)
    deadline = None if timeout is None else time.monotonic() + timeout
    with c.client() as client:
        try:
            receipt = client.submit_batch(file=file, callback_url=callback_url)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="FILE") from exc
        if receipt.rejected:
            for row in receipt.rejected_rows:
                err.print(f"row {row.row} rejected: {row.errors}", highlight=False, markup=False)
        if not wait:
            c.emit(
                receipt,
                f"{receipt.id}  {receipt.status}  accepted {receipt.accepted}  rejected {receipt.rejected}",
            )
            return EXIT_API if receipt.rejected else EXIT_OK
        state = _follow(client, receipt.id, receipt.accepted, deadline, quiet=c.as_json)
    counts = {k: int(v) for k, v in (state.jobs or {}).items()}
    summary = "  ".join(f"{k} {counts.get(k, 0)}" for k in ("succeeded", "failed", "cancelled"))
    c.emit(state, f"{state.id}  {state.total} rows  rejected {state.rejected}  {summary}")
    if counts.get("failed"):
        return EXIT_FAILED
    if counts.get("cancelled"):
        return EXIT_CANCELLED
    return EXIT_API if state.rejected else EXIT_OK


def _follow(client: Client, batch_id: str, accepted: int, deadline: float | None, *, quiet: bool) -> Any:
    """Poll the batch (it counts its jobs by status) until every accepted row is a final job."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, disable=quiet, transient=False) as progress:
        loading = progress.add_task("loading", total=accepted)
        final = progress.add_task("final", total=accepted)
        pause = 0.5
        while True:
            state = client.batch(batch_id)
            counts = state.jobs or {}
            done = sum(int(counts.get(s, 0)) for s in _core.FINAL_STATUSES)
            progress.update(loading, completed=state.loaded)
            progress.update(final, completed=done)
            if state.status == "failed":
                _fail(EXIT_API, f"batch {batch_id} failed: {state.error}")
            if state.status == "loaded" and done >= state.loaded:
                return state
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(state)
            time.sleep(pause)
            pause = min(pause * 1.25, 2.0)


@main.command()
@click.argument("seeds", nargs=-1, required=True)
@click.option(
    "--max-pages", type=click.IntRange(min=1), required=True, help="Exactly the most pages fetched."
)
@click.option(
    "--max-depth", type=click.IntRange(min=0), default=None, help="Links followed from a seed [10]."
)
@click.option("--scope", type=click.Choice(["same_origin", "same_site", "prefix"]), default=None)
@click.option("--include", multiple=True, help="Keep only links whose path matches (repeatable).")
@click.option("--exclude", multiple=True, help="Drop links whose path matches (repeatable).")
@click.option("--max-attempts", type=int, default=None, help="Each page's job's attempts.")
@click.option("--callback-url", default=None, help="Called (signed) once when the crawl ends.")
@click.option(
    "--wait", is_flag=True, help="Wait until the crawl ends, with a progress bar of pages done / found."
)
@click.option(
    "--timeout", type=float, default=None, help="With --wait: give up after this many seconds (exit 4)."
)
@json_option
@click.pass_context
@_api_errors
def crawl(
    ctx: click.Context,
    seeds: tuple[str, ...],
    max_pages: int,
    max_depth: int | None,
    scope: str | None,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    max_attempts: int | None,
    callback_url: str | None,
    wait: bool,
    timeout: float | None,
    as_json: bool | None,
) -> int:
    """Crawl from SEEDS (one or more URLs): the pages found by following links within the scope
    become jobs, never more than --max-pages (docs/crawls.md)."""
    c = _ctx(ctx, as_json)
    options: dict[str, Any] = {}
    for name, value in (("max_depth", max_depth), ("scope", scope), ("callback_url", callback_url)):
        if value is not None:
            options[name] = value
    if include:
        options["include"] = list(include)
    if exclude:
        options["exclude"] = list(exclude)
    if max_attempts is not None:
        options["job"] = {"max_attempts": max_attempts}
    with c.client() as client:
        started = client.crawl(list(seeds), max_pages=max_pages, **options)
        if not wait:
            c.emit(started, f"{started.id}  {started.status}  max_pages {started.max_pages}")
            return EXIT_OK
        state = _follow_crawl(client, started.id, timeout, quiet=c.as_json)
    counts = state.pages.raw if state.pages else {}
    summary = "  ".join(f"{k} {counts.get(k, 0)}" for k in ("total", "succeeded", "failed", "cancelled"))
    c.emit(state, f"{state.id}  {state.status}  pages: {summary}")
    if counts.get("failed"):
        return EXIT_FAILED
    if state.status == "cancelled" or counts.get("cancelled"):
        return EXIT_CANCELLED
    return EXIT_OK


def _follow_crawl(client: Client, crawl_id: str, timeout: float | None, *, quiet: bool) -> Any:
    """Follow the crawl to its end: the bar's total is the pages found so far (it grows as
    links are read), its progress the pages final."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, disable=quiet, transient=False) as progress:
        bar = progress.add_task("pages done / found", total=None)
        state = None
        for state in client.follow_crawl(crawl_id, timeout):
            counts = state.pages.raw if state.pages else {}
            done = sum(int(counts.get(s, 0)) for s in _core.FINAL_STATUSES)
            progress.update(bar, completed=done, total=max(int(counts.get("total", 0)), 1))
        return state


@main.group()
def tokens() -> None:
    """The tenant's API tokens (an admin token's calls, docs/tokens.md)."""


@tokens.command(name="ls")
@json_option
@click.pass_context
@_api_errors
def tokens_ls(ctx: click.Context, as_json: bool | None) -> int:
    """List the tokens not revoked, newest first (never their secrets)."""
    c = _ctx(ctx, as_json)
    with c.client() as client:
        for t in client.tokens():
            c.emit(
                t,
                f"{t.id}  {t.scope:<5}  {t.prefix}…  {t.name}  expires {t.expires_at or 'never'}  "
                f"last used {t.last_used_at or 'never'}",
            )
    return EXIT_OK


@tokens.command(name="create")
@click.argument("name")
@click.option("--scope", type=click.Choice(["admin", "full", "read"]), required=True)
@click.option("--expires-at", default=None, help="ISO 8601 time; none: never.")
@json_option
@click.pass_context
@_api_errors
def tokens_create(
    ctx: click.Context, name: str, scope: str, expires_at: str | None, as_json: bool | None
) -> int:
    """Create a token and print its secret (shown this once)."""
    c = _ctx(ctx, as_json)
    with c.client() as client:
        made = client.create_token(name, scope, expires_at=expires_at)
    c.emit(made, made.token)
    return EXIT_OK


@tokens.command(name="revoke")
@click.argument("token_id", type=int)
@click.pass_context
@_api_errors
def tokens_revoke(ctx: click.Context, token_id: int) -> int:
    """Revoke a token: every web process refuses it from now on."""
    with _ctx(ctx, None).client() as client:
        client.revoke_token(token_id)
    return EXIT_OK


# Column headings of `scrapejobs usage`, by attempt outcome.
_OUTCOME_HEADINGS = {
    "succeeded": "ok",
    "failed_temporary": "temp fail",
    "failed_permanent": "perm fail",
    "cancelled": "cancelled",
    "lost": "lost",
    "deferred": "deferred",
}


def _month_range(month: str) -> tuple[date, date]:
    try:
        first = datetime.strptime(month, "%Y-%m").date()
    except ValueError:
        raise click.BadParameter("YYYY-MM, e.g. 2026-12.", param_hint="--month") from None
    following = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    return first, following - timedelta(days=1)


@main.command()
@click.option("--month", default=None, help="A calendar month, YYYY-MM (UTC days); default: this month.")
@click.option("--from", "from_", default=None, help="First day, YYYY-MM-DD (with --to, instead of --month).")
@click.option("--to", default=None, help="Last day, YYYY-MM-DD, included.")
@json_option
@click.pass_context
@_api_errors
def usage(
    ctx: click.Context, month: str | None, from_: str | None, to: str | None, as_json: bool | None
) -> int:
    """The tenant's usage per day, as a table (docs/usage.md); usage before the service recorded
    it (its deployment) shows as zeros."""
    if month is not None and (from_ or to):
        raise click.UsageError("--month or --from/--to, not both.")
    if (from_ is None) != (to is None):
        raise click.UsageError("--from and --to go together.")
    if from_ is None or to is None:
        first, last = _month_range(month or datetime.now(UTC).strftime("%Y-%m"))
        from_, to = first.isoformat(), last.isoformat()
    c = _ctx(ctx, as_json)
    with c.client() as client:
        report = client.usage(from_, to)
    if c.as_json:
        c.emit(report, "")
        return EXIT_OK
    table = Table(title=f"usage {report.from_} to {report.to} (UTC days)")
    for heading in (
        "day",
        "jobs",
        *_OUTCOME_HEADINGS.values(),
        "bytes stored",
        "rendered",
        "batches",
        "crawls",
    ):
        table.add_column(heading, justify="left" if heading == "day" else "right")
    rows: list[tuple[str, UsageDay | UsageTotals]] = [(d.date, d) for d in report.days]
    rows.append(("total", report.totals))
    for n, (label, row) in enumerate(rows):
        attempts = row.attempts.raw
        table.add_row(
            label,
            str(row.jobs_submitted),
            *(str(attempts.get(outcome, 0)) for outcome in _OUTCOME_HEADINGS),
            str(row.bytes_stored),
            str(row.rendered_pages),
            str(row.batches),
            str(row.crawls),
            end_section=n == len(rows) - 2,
        )
    Console(width=200).print(table)
    return EXIT_OK


@main.command(name="mcp")
@click.pass_context
def mcp_serve(ctx: click.Context) -> None:
    """Run an MCP server over stdio (tools: submit a job or a crawl, wait, read a result's text),
    for an AI assistant to fetch through this service (docs/client.md). Needs the [mcp] extra."""
    c = _ctx(ctx, None)
    from scrapejobs_client.mcp_server import serve

    try:
        serve(url=c.url, token=c.token)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


@main.group(name="webhook-secret")
def webhook_secret() -> None:
    """The tenant's webhook secret (an admin token's calls, docs/webhooks.md)."""


@webhook_secret.command(name="show")
@json_option
@click.pass_context
@_api_errors
def webhook_secret_show(ctx: click.Context, as_json: bool | None) -> int:
    """When the current and previous secrets were made and when the previous stops signing."""
    c = _ctx(ctx, as_json)
    with c.client() as client:
        found = client.webhook_secrets()
    previous = found.previous
    c.emit(
        found,
        f"current  made {found.current.created_at}\n"
        + (
            f"previous made {previous.created_at}, signs until {previous.expires_at}"
            if previous
            else "previous none"
        ),
    )
    return EXIT_OK


@webhook_secret.command(name="rotate")
@json_option
@click.pass_context
@_api_errors
def webhook_secret_rotate(ctx: click.Context, as_json: bool | None) -> int:
    """Make a new secret and print it (shown this once); the old one signs beside it for the grace."""
    c = _ctx(ctx, as_json)
    with c.client() as client:
        rotated = client.rotate_webhook_secret()
    c.emit(rotated, rotated.secret)
    err.print(f"the previous secret signs until {rotated.previous_expires_at}", highlight=False)
    return EXIT_OK


@main.group(name="webhook-deliveries")
def webhook_deliveries() -> None:
    """The tenant's webhook deliveries (docs/webhooks.md)."""


@webhook_deliveries.command(name="ls")
@click.option("--status", type=click.Choice(["pending", "delivered", "failed", "skipped"]), default=None)
@click.option("--job", default=None, help="The deliveries of one job.")
@json_option
@click.pass_context
@_api_errors
def webhook_deliveries_ls(
    ctx: click.Context, status: str | None, job: str | None, as_json: bool | None
) -> int:
    """List deliveries, newest first (URLs with their query values masked)."""
    c = _ctx(ctx, as_json)
    with c.client() as client:
        for d in client.webhook_deliveries(status=status, job=job):
            c.emit(
                d,
                f"{d.id}  {d.status:<9}  {d.event:<15}  attempts {d.attempts}  "
                f"last {d.last_status_code or '-'}  {d.url}",
            )
    return EXIT_OK


@webhook_deliveries.command(name="redeliver")
@click.argument("delivery_id", type=int)
@click.pass_context
@_api_errors
def webhook_deliveries_redeliver(ctx: click.Context, delivery_id: int) -> int:
    """Send a delivery again now (the same webhook-id, a new signature)."""
    with _ctx(ctx, None).client() as client:
        client.redeliver(delivery_id)
    return EXIT_OK


if __name__ == "__main__":
    main()
