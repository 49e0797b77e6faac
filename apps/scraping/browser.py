"""The browser component's Chromium (FR-30, NFR-31; docs/design/browser.md).

How pages and threads map: Playwright's API is bound to the thread (and event loop) that
started it, while the component's jobs run on Celery's threads (``SCRAPEJOBS_BROWSER_CONCURRENCY``
of them, one page each). So each process has ONE event-loop thread that owns Playwright and one
Chromium, driven with the async API; a Celery thread hands its render to that loop
(``asyncio.run_coroutine_threadsafe``) and waits for the answer, checking between waits whether
its attempt was cancelled or lost its lease (then the render is cancelled and its browser
context closed). Pages render concurrently on the loop; a page's blocking work (each of its
requests, fetched by the guarded fetcher) runs on a thread pool, never on the loop.

One Chromium serves many jobs, each in a fresh browser context (no cookie, cache or storage
carried from one job to the next), and is replaced after ``SCRAPEJOBS_BROWSER_PAGES_PER_BROWSER``
pages (the old one closes once its last page is done) or as soon as it is found disconnected or
its main process dead (it crashed or was killed; a watcher looks every 0.5 s and kills what is
left of its process group, whose helpers would otherwise keep Playwright's pipe open): the render
in flight fails with ``browser_crashed`` (temporary, so the job is retried) and the next one
starts a fresh Chromium. A render that outlives its deadline
is abandoned and its Chromium retired the same way. If the whole process dies, its jobs' leases
expire and the sweeper gives them back, as for every worker.

Chromium never reaches the network by itself: every request of the page is answered by the
interception (``Page`` handler given in ``RenderSpec.answer``), and Chromium is started with a
proxy that goes nowhere (``--proxy-server`` to the discard port, loopback not bypassed) and a
resolver that resolves nothing, so a request the interception does not see (it sees every one it
is documented to) fails instead of reaching anything.

A page's own work, in its context (the interception, navigation and snapshot), is
``apps.scraping.browser_page``'s; finding, and killing, Chromium's processes
``apps.scraping.chromium_processes``'.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from apps.scraping.browser_page import PAGE_FETCH_THREADS, PageInterception, Rendered, RenderSpec, page_render
from apps.scraping.chromium_processes import main_chromiums, process_alive, process_group_kill
from apps.scraping.errors import FetchError

logger = logging.getLogger(__name__)

# Chromium's switches: no background traffic of its own (updates, sync, safe browsing), and the
# network closed (see the module docstring). The discard port (9) on loopback accepts nothing.
CHROMIUM_ARGS = (
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--disable-quic",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    # A page's scripts get a bounded JS heap (past it the tab dies, not the pod), and WebRTC may
    # not send UDP around the (closed) proxy: no host address leaks through ICE candidates.
    "--js-flags=--max-old-space-size=256",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
)
# How long closing a page's browser context may take; past it its Chromium is killed and the
# pool starts another (a hung Chromium never keeps a slot).
CONTEXT_CLOSE_TIMEOUT_S = 10.0
# How long a Celery thread waits for the loop between two checks of its attempt's lease.
_POLL_S = 0.25
# How often the loop looks whether each Chromium's main process is still alive.
_WATCH_S = 0.5
# Past the render's own deadline, how long the loop gets to give up by itself before the render
# is abandoned and its Chromium retired (a hung browser).
_HUNG_GRACE_S = 5.0


class BrowserCrashed(Exception):
    """Chromium disconnected while the page rendered (crashed, killed, out of memory)."""


@dataclass(eq=False)
class _Chromium:
    browser: Any
    pid: int | None = None  # its main process (None where /proc cannot tell)
    pages: int = 0
    in_flight: int = 0
    retired: bool = False


class BrowserPool:
    """One process's Chromium and the event-loop thread that drives it (see the module docstring)."""

    def __init__(self, *, executable: str, sandbox: bool, pages_per_browser: int, concurrency: int):
        self.executable = executable
        self.sandbox = sandbox
        self.pages_per_browser = pages_per_browser
        self.concurrency = concurrency
        self._start_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._playwright: Any = None
        self._current: _Chromium | None = None
        self._chromiums: set[_Chromium] = set()  # launched and not yet closed
        self._watcher: asyncio.Future[None] | None = None
        self._launch_lock: asyncio.Lock | None = None
        self._slots: asyncio.Semaphore | None = None
        # A page's requests are fetched here: a few at once per page, as a browser would.
        self._fetchers = concurrent.futures.ThreadPoolExecutor(
            max_workers=PAGE_FETCH_THREADS * concurrency, thread_name_prefix="page-fetch"
        )
        self.launches = 0  # Chromiums started by this pool (tests, the benchmark)

    # --- The Celery thread's side ----------------------------------------------------------

    def render(self, spec: RenderSpec, *, check: Callable[[], None]) -> Rendered:
        """Render ``spec`` on the loop; raises ``FetchError`` (timeout, browser_crashed,
        render_error) or what ``check`` raises (the attempt was stopped: the render is cancelled)."""
        loop = self._started()
        future = asyncio.run_coroutine_threadsafe(self._render(spec), loop)
        while True:
            try:
                return future.result(timeout=_POLL_S)
            except concurrent.futures.TimeoutError:
                pass
            try:
                check()
            except BaseException:
                future.cancel()
                raise
            if time.monotonic() > spec.deadline + _HUNG_GRACE_S:
                future.cancel()
                loop.call_soon_threadsafe(self._retire_current)
                raise FetchError(
                    "timeout", "the render did not end within the job's timeout", permanent=False
                )

    def close(self) -> None:
        loop = self._loop
        if loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        self._fetchers.shutdown(wait=False, cancel_futures=True)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = concurrent.futures.Future[None]()
                threading.Thread(
                    target=self._run_loop, args=(loop, ready), name="browser-loop", daemon=True
                ).start()
                ready.result(timeout=60)
                self._loop = loop
            return self._loop

    def _run_loop(self, loop: asyncio.AbstractEventLoop, ready: concurrent.futures.Future[None]) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._start_playwright())
        except BaseException as e:  # noqa: BLE001 - handed to the thread that waits for it
            ready.set_exception(e)
            return
        ready.set_result(None)
        loop.run_forever()

    # --- The loop's side ---------------------------------------------------------------------

    async def _start_playwright(self) -> None:
        from playwright.async_api import async_playwright  # noqa: PLC0415 - only the browser component needs it

        self._playwright = await async_playwright().start()
        self._launch_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(self.concurrency)
        self._watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        """A Chromium whose main process died (killed, out of memory) is finished off, so that
        Playwright sees it disconnect and the renders in flight fail with ``browser_crashed``
        at once instead of at their deadline."""
        while True:
            await asyncio.sleep(_WATCH_S)
            for chromium in list(self._chromiums):
                if chromium.pid is not None and not process_alive(chromium.pid):
                    logger.warning("Chromium (pid %s) died; its renders in flight are retried", chromium.pid)
                    process_group_kill(chromium.pid)
                    self._chromiums.discard(chromium)
                    self._retire(chromium)

    async def _shutdown(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        if self._current is not None:
            await self._close(self._current)
            self._current = None
        if self._playwright is not None:
            await self._playwright.stop()

    async def _chromium(self) -> _Chromium:
        """The Chromium for the next page: the current one unless it has rendered its share of
        pages or is no longer connected, then a fresh one."""
        assert self._launch_lock is not None
        async with self._launch_lock:
            current = self._current
            if current is not None and (
                current.pages >= self.pages_per_browser or not current.browser.is_connected()
            ):
                self._retire(current)
                current = None
            if current is None:
                before = main_chromiums()
                browser = await self._playwright.chromium.launch(
                    executable_path=self.executable,
                    chromium_sandbox=self.sandbox,
                    args=list(CHROMIUM_ARGS),
                    handle_sigint=False,
                    handle_sigterm=False,
                    handle_sighup=False,
                )
                self.launches += 1
                started = main_chromiums() - before
                current = self._current = _Chromium(browser, pid=min(started) if len(started) == 1 else None)
                self._chromiums.add(current)
            current.pages += 1
            return current

    def _retire_current(self) -> None:
        if self._current is not None:
            self._retire(self._current)

    def _retire(self, chromium: _Chromium) -> None:
        """No new page for ``chromium``; it closes once its last page is done."""
        chromium.retired = True
        if self._current is chromium:
            self._current = None
        if chromium.in_flight == 0:
            asyncio.ensure_future(self._close(chromium))

    async def _close(self, chromium: _Chromium) -> None:
        self._chromiums.discard(chromium)
        try:
            await asyncio.wait_for(chromium.browser.close(), timeout=10)
        except Exception:  # noqa: BLE001 - already gone (crashed, killed) or hung
            logger.debug("closing a retired Chromium failed", exc_info=True)
        if chromium.pid is not None and process_alive(chromium.pid):
            process_group_kill(chromium.pid)

    async def _render(self, spec: RenderSpec) -> Rendered:
        from playwright.async_api import Error as PlaywrightError  # noqa: PLC0415
        from playwright.async_api import TimeoutError as PlaywrightTimeout  # noqa: PLC0415

        assert self._slots is not None
        async with self._slots:
            try:
                chromium = await self._chromium()
            except PlaywrightError as e:
                # Chromium would not start (or died starting): temporary, the job is retried.
                raise FetchError(
                    "browser_crashed", f"the browser could not be started: {e.message}", permanent=False
                ) from None
            chromium.in_flight += 1
            try:
                return await self._page(chromium, spec)
            except PlaywrightTimeout as e:
                raise FetchError(
                    "timeout",
                    f"the render did not end within the job's timeout: {e.message}",
                    permanent=False,
                ) from None
            except PlaywrightError as e:
                if not chromium.browser.is_connected():
                    self._retire(chromium)
                    raise FetchError(
                        "browser_crashed", "the browser process ended during the render", permanent=False
                    ) from None
                raise FetchError(
                    "render_error", f"the page could not be rendered: {e.message}", permanent=False
                ) from None
            finally:
                chromium.in_flight -= 1
                if chromium.retired and chromium.in_flight == 0:
                    asyncio.ensure_future(self._close(chromium))

    async def _page(self, chromium: _Chromium, spec: RenderSpec) -> Rendered:
        """``spec`` rendered in a fresh browser context of ``chromium``, closed afterwards."""
        viewport = spec.options.get("viewport") or {}
        context = await chromium.browser.new_context(
            viewport={"width": int(viewport.get("width", 1280)), "height": int(viewport.get("height", 800))},
            user_agent=spec.user_agent,
            # A service worker's requests do not pass the page's interception: none may start.
            service_workers="block",
            accept_downloads=False,
        )
        interception = PageInterception(spec=spec, fetchers=self._fetchers)
        try:
            return await page_render(context, spec, interception)
        finally:
            interception.close()
            await self._context_close(context, chromium)

    async def _context_close(self, context: Any, chromium: _Chromium) -> None:
        try:
            await asyncio.wait_for(context.close(), timeout=CONTEXT_CLOSE_TIMEOUT_S)
        except TimeoutError:
            # A hung Chromium: no new page for it, and killed now rather than when its
            # last page ends (this one may be its last, and hung).
            logger.warning(
                "closing a browser context took over %ss: its Chromium is killed", CONTEXT_CLOSE_TIMEOUT_S
            )
            self._retire(chromium)
            if chromium.pid is not None and process_alive(chromium.pid):
                process_group_kill(chromium.pid)
        except Exception:  # noqa: BLE001 - the browser is gone: nothing left to close
            logger.debug("closing a browser context failed", exc_info=True)


_pool: BrowserPool | None = None
_pool_lock = threading.Lock()


def browser_pool() -> BrowserPool:
    """This process's pool, made on first use (only the browser component renders)."""
    global _pool  # noqa: PLW0603 - one pool per process
    with _pool_lock:
        if _pool is None:
            _pool = BrowserPool(
                executable=settings.SCRAPEJOBS_BROWSER_EXECUTABLE,
                sandbox=settings.SCRAPEJOBS_BROWSER_SANDBOX,
                pages_per_browser=settings.SCRAPEJOBS_BROWSER_PAGES_PER_BROWSER,
                concurrency=settings.SCRAPEJOBS_BROWSER_CONCURRENCY,
            )
        return _pool
