"""Crawl benchmark (FR-39, FR-40; docs/benchmarks.md): a generated local site (bench/crawl_site.py:
10,000 pages, each linking to 10 others and 2 outside the scope, a sitemap index of two gzipped
sitemaps, every page answered after 2 s) crawled with ``max_pages=5000`` at 100 fetches at once,
twice, each against a fresh copy of the site:

- scrapejobs: the components as ``make run`` starts them (web, control, beat, a worker of 100
  threads; default settings, so beat's ``crawls-expand`` every 2 s) on a throwaway database, the
  bench host's domain policy lifted to 100 at once and no rate limit; the crawl is ``POST
  /api/v1/crawls`` over HTTP, measured from that request to the crawl's ``completed``.
- Scrapy: bench/crawl_scrapy.py (a CrawlSpider, CONCURRENT_REQUESTS=100,
  CONCURRENT_REQUESTS_PER_DOMAIN=100, no download delay, AutoThrottle off), in the bench's own
  virtualenv (``.run/bench/scrapy-venv``, Scrapy installed from PyPI on first use, never in the
  project's requirements); measured from its spider's start to its close.

Printed for both: pages/s and its share of Little's law (100 fetches at once / 2 s = 50 pages/s),
CPU seconds per page (scrapejobs: every service process, PostgreSQL and Redis included; the site
excluded on both sides), peak memory (the sum over kinds of process of the largest one's peak
resident set), pages fetched (as the site counts them), and scrapejobs/Scrapy ratios.

Sizes: ``BENCH_CRAWL_PAGES`` [10000], ``BENCH_CRAWL_MAX_PAGES`` [5000], ``BENCH_CRAWL_DELAY_S``
[2], ``BENCH_CRAWL_CONCURRENCY`` [100]; ``BENCH_CRAWL_SMALL=1`` is 300 pages, max 150, 0.2 s (the
benchmarks' smoke test). ``BENCH_CRAWL_SCRAPY``: ``on`` [default; installs Scrapy when missing],
``off`` (the scrapejobs side only, e.g. where PyPI cannot be reached).
``BENCH_CRAWL_EXPAND_INTERVAL_S`` overrides the service's ``SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S``
(unset: the service's default), to see what the expansion cadence costs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.common import (
    ROOT,
    Proc,
    celery_ready,
    create_tenant,
    figure,
    flush_redis,
    free_port,
    http_ok,
    manage,
    note,
    running,
    service_env,
    sql,
    throwaway_database,
    wait_until,
)
from bench.cpu import CpuMeter, service_classifier
from scrapejobs import processes

SMALL = os.environ.get("BENCH_CRAWL_SMALL", "") not in ("", "0")
PAGES = int(os.environ.get("BENCH_CRAWL_PAGES", "300" if SMALL else "10000"))
MAX_PAGES = int(os.environ.get("BENCH_CRAWL_MAX_PAGES", "150" if SMALL else "5000"))
DELAY_S = float(os.environ.get("BENCH_CRAWL_DELAY_S", "0.2" if SMALL else "2"))
CONCURRENCY = int(os.environ.get("BENCH_CRAWL_CONCURRENCY", "100"))
MAX_DEPTH = 10  # the service's default max_depth; Scrapy's DEPTH_LIMIT the same
SCRAPY = os.environ.get("BENCH_CRAWL_SCRAPY", "on")
EXPAND_INTERVAL_S = os.environ.get("BENCH_CRAWL_EXPAND_INTERVAL_S", "")
DATABASE = "bench_crawl"
SCRAPY_VENV = ROOT / ".run" / "bench" / "scrapy-venv"
TIMEOUT_S = 1800


def _site() -> tuple[Proc, str]:
    proc = Proc(
        "crawl-site", [sys.executable, "-m", "bench.crawl_site", str(PAGES), str(DELAY_S)], dict(os.environ)
    )
    wait_until(lambda: "http://" in proc.output(), 10, "the site")
    base = proc.output().split()[0]
    wait_until(lambda: http_ok(base + "/stats"), 10, "the site")
    return proc, base


def _site_stats(base: str) -> dict[str, int]:
    with urllib.request.urlopen(base + "/stats", timeout=10) as r:
        return dict(json.loads(r.read()))


def _post_crawl(port: int, token: str, seed: str) -> str:
    body = json.dumps({"seeds": [seed], "max_pages": MAX_PAGES, "max_depth": MAX_DEPTH}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/crawls",
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        assert r.status == 202, r.status
        return str(json.loads(r.read())["id"])


def _lift_domain_policy(env: dict[str, str], domain: str) -> None:
    """The bench host's policy: CONCURRENCY fetches at once, no rate limit (politeness, FR-11)."""
    manage(
        "shell",
        "-c",
        "from apps.politeness.models import DomainPolicy; DomainPolicy.objects.update_or_create("
        f"domain={domain!r}, defaults=dict(requests_per_second=1e6, burst=1000000, max_concurrency={CONCURRENCY}))",
        env=env,
    )


def _scrapejobs(site: str) -> dict[str, float]:
    results = Path(tempfile.mkdtemp(prefix="bench-crawl-results-"))
    overrides = {"SCRAPEJOBS_WORKER_CONCURRENCY": str(CONCURRENCY), "SCRAPEJOBS_RESULTS_DIR": str(results)}
    if EXPAND_INTERVAL_S:
        overrides["SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S"] = EXPAND_INTERVAL_S
    try:
        with throwaway_database("crawl") as db:
            env = service_env(db, **overrides)
            _tenant_id, token = create_tenant(env)
            _lift_domain_policy(env, "127.0.0.1")
            port = free_port()
            procs = (
                Proc("web", processes.web(port=port), env),
                Proc("worker", processes.worker(concurrency=CONCURRENCY), env),
                Proc("control", processes.control(), env),
                Proc("beat", processes.beat(schedule_file=str(results / "celerybeat-schedule")), env),
            )
            with running(*procs) as (_web, worker, control, _beat):
                wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 120, "the web")
                wait_until(lambda: celery_ready(worker) and celery_ready(control), 120, "worker and control")
                classify = service_classifier(
                    DATABASE, submit="bench.crawl submit", target="bench.crawl_site"
                )
                with CpuMeter(classify) as meter:
                    started = time.time()
                    crawl_id = _post_crawl(port, token, f"{site}/p/0")
                    status = "SELECT status FROM crawls_crawl WHERE id = %s"
                    wait_until(
                        lambda: sql(db, status, [crawl_id])[0][0] != "running", TIMEOUT_S, "the crawl", 0.1
                    )
                    elapsed = time.time() - started
                counts = dict(
                    sql(
                        db,
                        "SELECT status, count(*) FROM jobs_job WHERE batch_id = %s GROUP BY status",
                        [crawl_id],
                    )
                )
                (row,) = sql(
                    db,
                    "SELECT status, pages, discovered, skipped_duplicate, skipped_out_of_scope, skipped_over_limit"
                    " FROM crawls_crawl WHERE id = %s",
                    [crawl_id],
                )
    finally:
        shutil.rmtree(results, ignore_errors=True)
    cpu = meter.totals()
    memory = meter.memory_mib()
    note(f"crawl scrapejobs: {row[0]} in {elapsed:.1f}s, jobs {counts}, CPU s by kind {cpu}")
    return {
        "elapsed_s": elapsed,
        "pages": float(row[1]),
        "succeeded": float(counts.get("succeeded", 0)),
        "discovered": float(row[2]),
        "duplicate": float(row[3]),
        "out_of_scope": float(row[4]),
        "over_limit": float(row[5]),
        "cpu_s": sum(v for k, v in cpu.items() if k != "target"),
        "peak_mib": sum(top for kind, (_first, top) in memory.items() if kind != "target"),
    }


def _scrapy_python() -> Path:
    python = SCRAPY_VENV / "bin" / "python"
    if (
        not python.exists()
        or subprocess.run([str(python), "-c", "import scrapy"], capture_output=True).returncode
    ):
        note(f"crawl: installing Scrapy from PyPI into {SCRAPY_VENV} (the bench's own virtualenv)")
        subprocess.run([sys.executable, "-m", "venv", str(SCRAPY_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "scrapy"], check=True)
    return python


def _scrapy(site: str) -> dict[str, float]:
    python = _scrapy_python()
    argv = [
        str(python),
        str(ROOT / "bench" / "crawl_scrapy.py"),
        site,
        str(MAX_PAGES),
        str(CONCURRENCY),
        str(MAX_DEPTH),
    ]

    def classify(_pid: int, cmdline: str, _environ: dict[str, str]) -> str | None:
        return "scrapy" if "crawl_scrapy.py" in cmdline else None

    with CpuMeter(classify) as meter:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"scrapy failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    memory = meter.memory_mib()
    return {
        "elapsed_s": out["finished"] - out["started"],
        "pages": float(out["pages"]),
        "cpu_s": sum(meter.totals().values()),
        "peak_mib": sum(top for _first, top in memory.values()),
    }


def run() -> None:
    ceiling = CONCURRENCY / DELAY_S
    note(
        f"crawl: a site of {PAGES} pages answering after {DELAY_S} s, max_pages {MAX_PAGES}, "
        f"{CONCURRENCY} fetches at once (Little's law: {ceiling:.0f} pages/s)"
    )
    figure("crawl_site_pages", PAGES)
    figure("crawl_max_pages", MAX_PAGES)
    figure("crawl_page_delay_s", DELAY_S)
    figure("crawl_concurrency", CONCURRENCY)
    figure("crawl_littles_law_pages_per_s", ceiling)
    sides: dict[str, dict[str, float]] = {}
    flush_redis()
    site_proc, site = _site()
    with running(site_proc):
        ours = _scrapejobs(site)
        ours["fetched"] = float(_site_stats(site)["pages"])
        ours["max_in_flight"] = float(_site_stats(site)["max_in_flight"])
    flush_redis()
    sides["scrapejobs"] = ours
    if SCRAPY != "off":
        site_proc, site = _site()
        with running(site_proc):
            theirs = _scrapy(site)
            theirs["fetched"] = float(_site_stats(site)["pages"])
            theirs["max_in_flight"] = float(_site_stats(site)["max_in_flight"])
        sides["scrapy"] = theirs
    for side, m in sides.items():
        per_s = m["pages"] / m["elapsed_s"]
        m["per_s"] = per_s
        figure(f"crawl_{side}_seconds", m["elapsed_s"])
        figure(f"crawl_{side}_pages_per_s", per_s)
        figure(f"crawl_{side}_share_of_littles_law", per_s / ceiling)
        figure(f"crawl_{side}_cpu_ms_per_page", m["cpu_s"] * 1000 / max(m["pages"], 1))
        figure(f"crawl_{side}_peak_memory_mib", m["peak_mib"])
        figure(f"crawl_{side}_pages_fetched", int(m["fetched"]))
        figure(f"crawl_{side}_max_fetches_in_flight", int(m["max_in_flight"]))
    figure("crawl_scrapejobs_pages_succeeded", int(ours["succeeded"]))
    figure("crawl_scrapejobs_links_discovered", int(ours["discovered"]))
    figure("crawl_scrapejobs_links_over_limit", int(ours["over_limit"]))
    if "scrapy" in sides:
        theirs = sides["scrapy"]
        figure("crawl_scrapejobs_to_scrapy_pages_per_s", ours["per_s"] / theirs["per_s"])
        figure(
            "crawl_scrapejobs_to_scrapy_cpu_per_page",
            (ours["cpu_s"] / max(ours["pages"], 1)) / (theirs["cpu_s"] / max(theirs["pages"], 1)),
        )
        figure("crawl_scrapejobs_to_scrapy_peak_memory", ours["peak_mib"] / theirs["peak_mib"])
    else:
        figure("crawl_scrapy", "skipped (BENCH_CRAWL_SCRAPY=off)")


if __name__ == "__main__":
    run()
