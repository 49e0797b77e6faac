"""One page's render inside its fresh browser context (FR-30, NFR-32; docs/design/browser.md):
every request of the page intercepted and answered by the guarded fetcher on the page's own share
of the fetch threads (``PageInterception``), websockets blocked, then the navigation, the waits
and the snapshot (``page_render``). Chromium, its contexts and the event loop are the pool's
(apps/scraping/browser.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from apps.scraping.errors import FetchError

logger = logging.getLogger(__name__)

# Requests one page has fetched at once, as a browser would: a page past it waits for its own
# threads, never takes another page's share of the pool (6 per page it renders at once).
PAGE_FETCH_THREADS = 6


@dataclass(frozen=True)
class SubAnswer:
    """What the interception does with one request: ``fulfill`` it with ``status``, ``headers``
    and ``body`` (fetched by the guarded fetcher), ``block`` it (refused: counted as blocked), or
    ``fail`` it (the fetch failed: a network error for the page)."""

    action: str  # fulfill, block, fail
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    reason: str = ""


# (url, method, headers, body, resource type, is the page's main document) -> what to do.
Answer = Callable[[str, str, dict[str, str], bytes | None, str, bool], SubAnswer]


@dataclass(frozen=True)
class RenderSpec:
    url: str  # the document's URL, after its redirects
    options: dict[str, Any]  # Job.browser_options
    user_agent: str
    deadline: float  # time.monotonic()
    answer: Answer


@dataclass
class Rendered:
    html: str
    screenshot: bytes | None
    made: int  # requests the page made besides its document
    blocked: int  # of those, not let through


def _answer_in_thread(answer: Answer, *args: Any) -> SubAnswer:
    """``answer`` on a fetch thread; the thread's database connection (a domain policy read) is
    given back when it is done, since the thread outlives the page."""
    try:
        return answer(*args)
    finally:
        connection.close()


def _left_ms(spec: RenderSpec) -> float:
    left = spec.deadline - time.monotonic()
    if left <= 0:
        raise FetchError("timeout", "the render did not end within the job's timeout", permanent=False)
    return left * 1000


class PageInterception:
    """The interception of one page's requests (``Page`` handlers on its context): the main
    document once, every other request fetched through ``spec.answer`` on a fetch thread, at
    most ``PAGE_FETCH_THREADS`` of them at once; counts what the page made and what was blocked.
    Made on the loop; ``close`` cancels the fetches still queued or running."""

    def __init__(self, *, spec: RenderSpec, fetchers: concurrent.futures.Executor):
        self.spec = spec
        self.fetchers = fetchers
        self.made = 0  # requests the page made besides its document
        self.blocked = 0  # of those, not let through
        self.document_served = False
        self.loop = asyncio.get_running_loop()
        # This page's share of the fetch threads, and its fetches still queued or running: those
        # are cancelled when the page is closed (a queued one never starts).
        self.share = asyncio.Semaphore(PAGE_FETCH_THREADS)
        self.pending: set[asyncio.Future[Any]] = set()
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for future in list(self.pending):
            future.cancel()

    async def on_request(self, route: Any) -> None:
        request = route.request
        main_navigation = request.is_navigation_request() and request.frame.parent_frame is None
        is_document = main_navigation and not self.document_served
        if is_document:
            self.document_served = True
        else:
            self.made += 1
        if main_navigation and not is_document:
            # A script sending the page elsewhere: the job is this document, and another
            # one would have had no politeness permit of its own.
            self.blocked += 1
            await route.abort("blockedbyclient")
            return
        try:
            answer = await self._fetched(request, is_document=is_document)
        except asyncio.CancelledError:
            return  # the page was closed
        except Exception:  # noqa: BLE001 - the page gets a network error, the render goes on
            logger.warning("answering %s failed", request.url, exc_info=True)
            answer = SubAnswer("fail", reason="internal error")
        if answer is None:  # the page was closed before its turn came
            return
        if answer.action == "fulfill":
            await route.fulfill(status=answer.status, headers=answer.headers, body=answer.body)
            return
        if answer.action == "block" and not is_document:
            self.blocked += 1
        await route.abort("blockedbyclient" if answer.action == "block" else "failed")

    async def _fetched(self, request: Any, *, is_document: bool) -> SubAnswer | None:
        """``spec.answer`` for ``request``, on a fetch thread within the page's share; None when
        the page was closed while it waited for its turn."""
        body = request.post_data_buffer
        async with self.share:
            if self.closed:
                return None
            future = self.loop.run_in_executor(
                self.fetchers,
                _answer_in_thread,
                self.spec.answer,
                request.url,
                request.method,
                dict(request.headers),
                body,
                request.resource_type,
                is_document,
            )
            self.pending.add(future)
            try:
                return await future
            finally:
                self.pending.discard(future)

    async def on_websocket(self, ws: Any) -> None:
        # Websockets are not fetched for the page: blocked (NFR-32), never connected.
        self.made += 1
        self.blocked += 1
        await ws.close(code=1008, reason="websockets are blocked")


async def page_render(context: Any, spec: RenderSpec, interception: PageInterception) -> Rendered:
    """Open the page in ``context`` with its requests intercepted, navigate, wait as the job's
    options say, and take its HTML (and screenshot)."""
    options = spec.options
    await context.route("**/*", interception.on_request)
    await context.route_web_socket("**/*", interception.on_websocket)
    page = await context.new_page()
    # Pages it opens (window.open) are closed at once: one page per job.
    context.on("page", lambda extra: asyncio.ensure_future(extra.close()) if extra is not page else None)
    await page.goto(spec.url, wait_until=options.get("wait_until", "load"), timeout=_left_ms(spec))
    selector = options.get("wait_for_selector")
    if selector:
        await page.wait_for_selector(selector, state="attached", timeout=_left_ms(spec))
    html = await page.content()
    screenshot = None
    if options.get("screenshot"):
        screenshot = await page.screenshot(full_page=True, type="png", timeout=_left_ms(spec))
    return Rendered(html=html, screenshot=screenshot, made=interception.made, blocked=interception.blocked)
