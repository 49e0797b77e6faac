"""Rendering benchmark (FR-30, NFR-31): what a rendered page costs next to a plain fetch of the
same URL, measured side by side in one run.

A local page (127.0.0.1) is an empty shell whose inline script inserts ``BENCH_BROWSER_ITEMS``
list items. It is rendered through the browser component's own machinery (``BrowserPool`` and
``PageRequests`` of apps/scraping: the document fetched by the guarded fetcher, Chromium given it
through the interception, ``page.content()`` read back) at 1, 2 and 4 pages per process, and
fetched plainly (``fetch_open``, the body read) with as many threads. Printed for each:

- ``browser_pN_pages_per_s`` and ``plain_pN_fetches_per_s``;
- ``browser_pN_cpu_ms_per_page`` (this process and every Chromium process, children reaped
  included: ``/proc`` utime + stime + cutime + cstime) and ``plain_pN_cpu_ms_per_fetch``;
- ``browser_pN_mem_mb_per_page``: the peak memory (proportional set size) of the Chromium
  processes while N pages render, divided by N (sampled every 0.2 s): a share of the browser
  process itself is in each page's figure;
- ``browser_pN_cpu_ratio``: CPU per rendered page over CPU per plain fetch.

The database and the broker play no part (they cost a rendered job what they cost a plain one).
``BENCH_BROWSER_PAGES`` pages per level (default 40). Needs /usr/bin/chromium (or
SCRAPEJOBS_BROWSER_EXECUTABLE).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.common import figure, in_process_database, note

LEVELS = (1, 2, 4)
_TICKS = os.sysconf("SC_CLK_TCK")


def _page(items: int) -> bytes:
    return (
        "<!doctype html><html><head><title>shell</title></head><body><ul id='list'></ul><script>"
        "var ul = document.getElementById('list');"
        f"for (var i = 0; i < {items}; i++) {{ var li = document.createElement('li');"
        "li.textContent = 'item ' + i + ' inserted by a script'; ul.appendChild(li); }"
        "</script></body></html>"
    ).encode()


def _serve(body: bytes) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/shell"


def _tree() -> list[int]:
    """This process's descendants (the Playwright driver, Chromium and its helpers)."""
    from apps.scraping.chromium_processes import process_tree  # noqa: PLC0415 - after django.setup

    return process_tree(os.getpid())


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15]) / _TICKS  # utime stime cutime cstime
    return total


def _chromium_pss_mb() -> float:
    """The Chromium processes' proportional set size: shared pages counted once across them
    (their resident sizes summed would count the shared libraries once per process)."""
    total = 0
    for pid in _tree():
        try:
            exe = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            if b"chromium" not in exe:
                continue
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _render_level(url: str, pages: int, n: int) -> None:
    from django.conf import settings  # noqa: PLC0415

    from apps.scraping.browser import BrowserPool  # noqa: PLC0415 - after django.setup
    from apps.scraping.browser_page import RenderSpec  # noqa: PLC0415 - after django.setup
    from apps.scraping.fetch import FetchRequest, fetch_open  # noqa: PLC0415
    from apps.scraping.fetched import FetchLimits  # noqa: PLC0415
    from apps.scraping.render import Document, PageRequests  # noqa: PLC0415

    pool = BrowserPool(
        executable=settings.SCRAPEJOBS_BROWSER_EXECUTABLE,
        sandbox=settings.SCRAPEJOBS_BROWSER_SANDBOX,
        pages_per_browser=1_000_000,
        concurrency=n,
    )
    limits = FetchLimits.from_settings()

    def render_one() -> int:
        with fetch_open(request=FetchRequest(method="GET", url=url, timeout_s=30)) as fetched:
            document = Document(fetched.url, fetched.status, fetched.content_type, b"".join(fetched.chunks()))
        # Generous: on a loaded machine a render can take many times its usual time, and a
        # benchmark that dies on one slow page says nothing.
        deadline = time.monotonic() + 180
        answers = PageRequests(document=document, options={}, deadline=deadline, limits=limits)
        spec = RenderSpec(
            url=url, options={}, user_agent=limits.user_agent, deadline=deadline, answer=answers
        )
        html = pool.render(spec, check=lambda: None).html
        assert "item 0 inserted by a script" in html
        return len(html)

    with ThreadPoolExecutor(n) as threads:
        list(threads.map(lambda _: render_one(), range(2 * n)))  # warm: Chromium started, code paged in
        peak = 0.0
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, _chromium_pss_mb())
                stop.wait(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        cpu_before = _own_cpu_s() + _cpu_s(_tree())
        started = time.monotonic()
        sampler.start()
        list(threads.map(lambda _: render_one(), range(pages)))
        elapsed = time.monotonic() - started
        cpu = _own_cpu_s() + _cpu_s(_tree()) - cpu_before
        stop.set()
        sampler.join()
    pool.close()
    figure(f"browser_p{n}_pages_per_s", pages / elapsed, "pages/s")
    figure(f"browser_p{n}_cpu_ms_per_page", cpu * 1000 / pages, "ms")
    figure(f"browser_p{n}_mem_mb_per_page", peak / n, "MB")
    _results[("browser", n)] = cpu / pages


def _plain_level(url: str, pages: int, n: int) -> None:
    from apps.scraping.fetch import FetchRequest, fetch_open  # noqa: PLC0415

    def fetch_one() -> int:
        with fetch_open(request=FetchRequest(method="GET", url=url, timeout_s=30)) as fetched:
            return len(b"".join(fetched.chunks()))

    with ThreadPoolExecutor(n) as threads:
        list(threads.map(lambda _: fetch_one(), range(2 * n)))
        cpu_before = _own_cpu_s()
        started = time.monotonic()
        list(threads.map(lambda _: fetch_one(), range(pages)))
        elapsed = time.monotonic() - started
        cpu = _own_cpu_s() - cpu_before
    figure(f"plain_p{n}_fetches_per_s", pages / elapsed, "fetches/s")
    figure(f"plain_p{n}_cpu_ms_per_fetch", cpu * 1000 / pages, "ms")
    _results[("plain", n)] = cpu / pages


_results: dict[tuple[str, int], float] = {}


def run() -> None:
    # The fetches read the domain's policy (its egress proxy, FR-28): a migrated database of its own.
    with in_process_database("browser"):
        _run()


def chromium_ready(what: str) -> bool:
    """Django set up in this process for a browser benchmark (the page on loopback, no sandbox as
    root), and whether Chromium is there: where it is not, ``what`` says it cannot run."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-secret-key-never-used-in-a-deployment")
    os.environ.setdefault("SCRAPEJOBS_ALLOW_PRIVATE_TARGETS", "true")  # the page is on loopback
    if os.geteuid() == 0:  # Chromium cannot sandbox itself as root
        os.environ.setdefault("SCRAPEJOBS_BROWSER_SANDBOX", "false")
    import django  # noqa: PLC0415

    django.setup()
    from django.conf import settings  # noqa: PLC0415

    if not os.access(settings.SCRAPEJOBS_BROWSER_EXECUTABLE, os.X_OK):
        note(f"no Chromium at {settings.SCRAPEJOBS_BROWSER_EXECUTABLE}: {what} cannot run")
        return False
    return True


def _run() -> None:
    if not chromium_ready("the browser benchmark"):
        return
    pages = int(os.environ.get("BENCH_BROWSER_PAGES", "40"))
    items = int(os.environ.get("BENCH_BROWSER_ITEMS", "200"))
    server, url = _serve(_page(items))
    try:
        for n in LEVELS:
            _plain_level(url, pages * 5, n)
            _render_level(url, pages, n)
            if _results[("plain", n)] > 0:
                figure(f"browser_p{n}_cpu_ratio", _results[("browser", n)] / _results[("plain", n)], "x")
            else:  # too few plain fetches for the process clock to see (a smoke run's sizes)
                note(f"browser: p{n} plain fetches used no measurable CPU; no ratio")
    finally:
        server.shutdown()
