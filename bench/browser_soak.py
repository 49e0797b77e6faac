"""Browser soak (FR-30, NFR-31; docs/design/browser.md): many rendered pages through one browser
component's machinery, watching for what a long-lived worker would leak.

A local page (127.0.0.1) with two external scripts, an inline one, two images and an iframe
(itself with a script and an image) is rendered ``BENCH_BROWSER_SOAK_PAGES`` times (default
2,000), one page at a time, through one ``BrowserPool`` of apps/scraping (the document fetched by
the guarded fetcher, every request of the page answered by ``PageRequests``), which replaces its
Chromium every ``BENCH_BROWSER_SOAK_PAGES_PER_BROWSER`` pages (default
``SCRAPEJOBS_BROWSER_PAGES_PER_BROWSER``). Every page must come back with its scripts run and its
seven requests made, none blocked (the page's domain is given a policy that never binds).

At the same point of each restart cycle, after the cycle's last page and before the next page
starts a fresh Chromium, once that page's renderer processes have exited, it samples:

- this process's resident set (the component: Playwright's client, the fetch threads, Django);
- the resident sets of every Chromium process under this one, summed;
- this process's open file descriptors;
- the number of Chromium processes under this one.

Not right after a relaunch: the retired Chromium closes while the fresh one starts, so what is
seen there depends on how far its closing got; by the cycle's end it is long gone, and whatever
it left behind is counted. Printed: one line per cycle (the curve), each measure's growth from
the second cycle to the largest value after it (``browser_soak_<measure>_growth_pct``; the first
cycle warms caches and pages code in), and the Chromium processes left under this process once
the pool is closed (``browser_soak_chromium_left_behind``, which must be 0). The curve is drawn
to ``BENCH_BROWSER_SOAK_PLOT`` (default .run/bench/browser-soak.png).
tests/rendering/test_browser_soak.py runs the same soak on 200 pages and holds the growth to
``GROWTH_LIMIT_PCT``. Needs /usr/bin/chromium (or SCRAPEJOBS_BROWSER_EXECUTABLE).
"""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.common import figure, in_process_database, note

ROOT = Path(__file__).resolve().parent.parent
# Where the curve is drawn (BENCH_BROWSER_SOAK_PLOT: a smoke run of the benchmarks writes elsewhere).
PLOT = Path(os.environ.get("BENCH_BROWSER_SOAK_PLOT") or ROOT / ".run" / "bench" / "browser-soak.png")
# How much a measure may grow after the second cycle (the soak test's bound).
GROWTH_LIMIT_PCT = 10.0
MEASURES = ("component_rss_mb", "chromium_rss_mb", "open_fds", "chromium_processes")
# Requests the page makes besides its document: a.js, b.js, 1.png, 2.png, the frame, f.js, 3.png.
PAGE_REQUESTS = 7
_MARK = "soak page filled by its scripts"
_CHROMIUM_NAMES = frozenset({"chromium", "chrome", "chromium-browser", "headless_shell"})


def _png(size: int, seed: int) -> bytes:
    """A ``size`` x ``size`` RGB PNG (a gradient, so that it is decoded, not skipped as blank)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(
        b"\0" + b"".join(bytes(((x + seed) % 256, (y * 4) % 256, seed % 256)) for x in range(size))
        for y in range(size)
    )
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _site_pages() -> dict[str, tuple[bytes, str]]:
    html, js, png = "text/html; charset=utf-8", "text/javascript", "image/png"
    return {
        "/soak": (
            (
                b"<!doctype html><html><head><title>soak</title>"
                b"<script src=/a.js></script><script src=/b.js></script></head><body>"
                b"<ul id=list></ul><img src=/1.png alt=one><img src=/2.png alt=two>"
                b"<iframe src=/frame title=frame></iframe>"
                b"<script>document.body.dataset.inline = String(window.soakA + window.soakB);</script>"
                b"</body></html>"
            ),
            html,
        ),
        "/a.js": (b"window.soakA = 40;", js),
        "/b.js": (
            (
                "window.soakB = 2; document.addEventListener('DOMContentLoaded', function () {"
                "var ul = document.getElementById('list');"
                "for (var i = 0; i < 50; i++) { var li = document.createElement('li');"
                f"li.textContent = '{_MARK} ' + i; ul.appendChild(li); }}"
                "});"
            ).encode(),
            js,
        ),
        "/frame": (
            b"<!doctype html><html><body><p id=f></p><img src=/3.png alt=three>"
            b"<script src=/f.js></script></body></html>",
            html,
        ),
        "/f.js": (b"document.getElementById('f').textContent = 'frame ran';", js),
        "/1.png": (_png(64, 1), png),
        "/2.png": (_png(64, 2), png),
        "/3.png": (_png(32, 3), png),
    }


def soak_site() -> tuple[ThreadingHTTPServer, str]:
    """The soak's page and its resources on a loopback port; returns the server and the page's URL."""
    pages = _site_pages()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body, content_type = pages.get(self.path.split("?", 1)[0], (b"not here", "text/plain"))
            self.send_response(200 if self.path.split("?", 1)[0] in pages else 404)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/soak"


@dataclass(frozen=True)
class Sample:
    cycle: int  # 1-based
    pages: int  # pages rendered when it was taken
    component_rss_mb: float
    chromium_rss_mb: float
    open_fds: int
    chromium_processes: int


@dataclass
class Soak:
    pages: int
    pages_per_browser: int
    seconds: float
    launches: int
    samples: list[Sample] = field(default_factory=list)
    chromium_left_behind: int = -1

    def growth_pct(self, measure: str) -> float | None:
        """How far ``measure`` rose past its value at the second cycle, at its largest after it
        (None with fewer than three cycles)."""
        if len(self.samples) < 3:
            return None
        base = float(getattr(self.samples[1], measure))
        later = max(float(getattr(s, measure)) for s in self.samples[2:])
        if base == 0:
            return 0.0 if later == 0 else float("inf")
        return (later - base) / base * 100


def _rss_kib(pid: int | str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0  # gone, or a zombie (no VmRSS line)


def chromium_processes() -> list[int]:
    """The live Chromium processes (main and helpers) under this process."""
    from apps.scraping.chromium_processes import process_alive, process_tree  # noqa: PLC0415 - after django.setup

    found = []
    for pid in process_tree(os.getpid()):
        try:
            name = os.readlink(f"/proc/{pid}/exe").rsplit("/", 1)[-1]
        except OSError:
            continue
        if name in _CHROMIUM_NAMES and process_alive(pid):
            found.append(pid)
    return found


def _renderers_gone(wait_s: float = 10.0) -> None:
    """Wait (at most ``wait_s``) for the renderer processes of the pages just closed to exit: a
    browser context's close returns before its renderer is gone, so without this the count would
    depend on how far their exit got. One that never goes is counted, as a leak should be."""
    until = time.monotonic() + wait_s
    while time.monotonic() < until:
        renderers = 0
        for pid in chromium_processes():
            try:
                renderers += b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
        if not renderers:
            return
        time.sleep(0.1)


def _sample(cycle: int, pages: int) -> Sample:
    _renderers_gone()
    chromiums = chromium_processes()
    return Sample(
        cycle=cycle,
        pages=pages,
        component_rss_mb=_rss_kib("self") / 1024,
        chromium_rss_mb=sum(_rss_kib(pid) for pid in chromiums) / 1024,
        open_fds=len(os.listdir("/proc/self/fd")),
        chromium_processes=len(chromiums),
    )


def _domain_open(host: str) -> None:
    """A policy for the page's domain that never binds: every request of every page is made (the
    default, 2 per second, would block most of them and the soak would render half a page)."""
    from apps.politeness.models import DomainPolicy  # noqa: PLC0415 - after django.setup
    from apps.politeness.selectors import domain_limits_cache_clear  # noqa: PLC0415

    DomainPolicy.objects.update_or_create(
        domain=host, defaults={"requests_per_second": 100_000, "burst": 100_000, "max_concurrency": 1_000}
    )
    domain_limits_cache_clear()


def _left_behind(wait_s: float = 10.0) -> int:
    """Chromium processes still under this one once the pool is closed (given ``wait_s`` to go)."""
    until = time.monotonic() + wait_s
    while (left := len(chromium_processes())) and time.monotonic() < until:
        time.sleep(0.2)
    return left


def soak(
    *, url: str, pages: int, pages_per_browser: int, on_sample: Callable[[Sample], None] | None = None
) -> Soak:
    """Render ``url`` ``pages`` times through one fresh ``BrowserPool`` (Django set up, a database
    and Redis at hand), sampling at the end of every full cycle of ``pages_per_browser`` pages."""
    from django.conf import settings  # noqa: PLC0415

    from apps.scraping.browser import BrowserPool  # noqa: PLC0415 - after django.setup
    from apps.scraping.browser_page import RenderSpec  # noqa: PLC0415
    from apps.scraping.fetch import FetchRequest, fetch_open  # noqa: PLC0415
    from apps.scraping.fetched import FetchLimits  # noqa: PLC0415
    from apps.scraping.render import Document, PageRequests  # noqa: PLC0415

    _domain_open("127.0.0.1")
    limits = FetchLimits.from_settings()
    pool = BrowserPool(
        executable=settings.SCRAPEJOBS_BROWSER_EXECUTABLE,
        sandbox=settings.SCRAPEJOBS_BROWSER_SANDBOX,
        pages_per_browser=pages_per_browser,
        concurrency=1,
    )
    result = Soak(pages=pages, pages_per_browser=pages_per_browser, seconds=0.0, launches=0)
    started = time.monotonic()
    try:
        for done in range(1, pages + 1):
            with fetch_open(request=FetchRequest(method="GET", url=url, timeout_s=30)) as fetched:
                document = Document(
                    fetched.url, fetched.status, fetched.content_type, b"".join(fetched.chunks())
                )
            # Generous: on a loaded machine a render can take many times its usual time.
            deadline = time.monotonic() + 120
            answers = PageRequests(document=document, options={}, deadline=deadline, limits=limits)
            spec = RenderSpec(
                url=url, options={}, user_agent=limits.user_agent, deadline=deadline, answer=answers
            )
            rendered = pool.render(spec, check=lambda: None)
            if _MARK not in rendered.html or 'data-inline="42"' not in rendered.html:
                raise AssertionError(f"page {done}: its scripts did not run")
            if (rendered.made, rendered.blocked) != (PAGE_REQUESTS, 0):
                raise AssertionError(
                    f"page {done}: {rendered.made} requests made, {rendered.blocked} blocked; "
                    f"expected {PAGE_REQUESTS}, none blocked"
                )
            if done % pages_per_browser == 0:
                sample = _sample(done // pages_per_browser, done)
                result.samples.append(sample)
                if on_sample is not None:
                    on_sample(sample)
        result.seconds = time.monotonic() - started
        result.launches = pool.launches
    finally:
        pool.close()
    result.chromium_left_behind = _left_behind()
    return result


def _print_sample(s: Sample) -> None:
    print(
        f"cycle {s.cycle:3d} (after page {s.pages:5d}): component {s.component_rss_mb:7.1f} MB, "
        f"Chromium {s.chromium_rss_mb:7.1f} MB in {s.chromium_processes} processes, "
        f"{s.open_fds} open fds",
        flush=True,
    )


def _plot(result: Soak) -> None:
    import matplotlib  # noqa: PLC0415 - only this benchmark draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    cycles = [s.cycle for s in result.samples]
    titles = {
        "component_rss_mb": "component RSS (MB)",
        "chromium_rss_mb": "Chromium RSS, all processes (MB)",
        "open_fds": "component open fds",
        "chromium_processes": "Chromium processes",
    }
    fig, axes = plt.subplots(2, 2, figsize=(10, 6), sharex=True)
    for ax, measure in zip(axes.flat, MEASURES, strict=True):
        values = [getattr(s, measure) for s in result.samples]
        ax.plot(cycles, values, marker="o", markersize=3, color="tab:blue")
        top = max(values)
        if len(values) >= 2:
            limit = values[1] * (1 + GROWTH_LIMIT_PCT / 100)
            ax.axhline(limit, color="grey", linestyle="--", linewidth=0.8)
            top = max(top, limit)
        ax.set_ylim(0, top * 1.15 or 1)
        ax.set_title(titles[measure], fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes[1]:
        ax.set_xlabel(f"restart cycle ({result.pages_per_browser} pages each)")
    fig.suptitle(
        f"{result.pages:,} pages through one BrowserPool; dashed: cycle 2 + {GROWTH_LIMIT_PCT:.0f} %",
        fontsize=11,
    )
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=80)
    plt.close(fig)
    figure("browser_soak_plot", str(PLOT.relative_to(ROOT)) if PLOT.is_relative_to(ROOT) else str(PLOT))


def run() -> None:
    # The fetches read the domain's policy: a migrated database of its own.
    with in_process_database("browser_soak"):
        _run()


def _run() -> None:
    from bench.browser import chromium_ready  # noqa: PLC0415

    if not chromium_ready("the browser soak"):
        return
    from django.conf import settings  # noqa: PLC0415

    pages = int(os.environ.get("BENCH_BROWSER_SOAK_PAGES", "2000"))
    per_browser = int(
        os.environ.get("BENCH_BROWSER_SOAK_PAGES_PER_BROWSER", settings.SCRAPEJOBS_BROWSER_PAGES_PER_BROWSER)
    )
    server, url = soak_site()
    try:
        result = soak(url=url, pages=pages, pages_per_browser=per_browser, on_sample=_print_sample)
    finally:
        server.shutdown()
    figure("browser_soak_pages", result.pages)
    figure("browser_soak_pages_per_browser", result.pages_per_browser)
    figure("browser_soak_chromium_launches", result.launches)
    figure("browser_soak_pages_per_s", result.pages / result.seconds, "pages/s")
    for measure in MEASURES:
        growth = result.growth_pct(measure)
        if growth is None:
            note(f"browser soak: {len(result.samples)} cycles, fewer than three: no growth for {measure}")
            continue
        figure(f"browser_soak_{measure}_cycle2", getattr(result.samples[1], measure))
        figure(f"browser_soak_{measure}_last", getattr(result.samples[-1], measure))
        figure(f"browser_soak_{measure}_growth_pct", growth, "%")
    figure("browser_soak_chromium_left_behind", result.chromium_left_behind)
    if result.samples:
        _plot(result)
