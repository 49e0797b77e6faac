"""/metrics benchmark: the cost of one scrape with 10 jobs in the ledger and with
1,000,000 jobs and about 3,000,000 attempts (BENCH_METRICS_JOBS), and their ratio (the promise:
within 2x). For contrast, the whole-ledger GROUP BY that /metrics ran before issue 13 is timed
once on the large ledger.

Setup, done by this module itself: two throwaway databases on DATABASE_URL's server
(bench/common.py), ``bench_metrics_small`` and ``bench_metrics_large``. Each ledger is written
with COPY by tests/support/big_ledger.py (a week of jobs: mostly succeeded, dead letters over
several error classes and 200 domains, some queued and running), then the rollup task's work
(``rollup_run``) folds every settled attempt in, as beat would have over that week (a child
process per database: ``python -m bench.metrics build N``). Then one real web server (gunicorn,
one process) per database answers GET /metrics over HTTP, the two taken in turns, ten scrapes at a
time, so that the machine's load (it is shared) weighs on both sides alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import requests

from bench.common import (
    ROOT,
    Proc,
    figure,
    flush_redis,
    free_port,
    http_ok,
    median,
    note,
    percentile,
    running,
    service_env,
    sql,
    throwaway_database,
    wait_until,
)
from scrapejobs import processes

SMALL = 10
LARGE = int(os.environ.get("BENCH_METRICS_JOBS", "1000000"))
ROUNDS = int(os.environ.get("BENCH_METRICS_ROUNDS", "30"))
PER_ROUND = 10

_OLD_COUNTS_SQL = """
SELECT status, count(*),
       EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 'queued')),
       count(*) FILTER (WHERE status = 'running' AND lease_expires_at < now())
  FROM jobs_job GROUP BY status
"""


def run() -> None:
    flush_redis()
    with throwaway_database("metrics_small") as small_db, throwaway_database("metrics_large") as large_db:
        for db, jobs in ((small_db, SMALL), (large_db, LARGE)):
            note(f"metrics: building a ledger of {jobs:,} jobs and its rollups")
            done = subprocess.run(
                [sys.executable, "-m", "bench.metrics", "build", str(jobs)], cwd=ROOT, env=service_env(db)
            )
            if done.returncode != 0:
                raise RuntimeError("bench.metrics build failed")
        small_url, large_url = _serve(small_db), _serve(large_db)
        with running(small_url[0], large_url[0]):
            times = _scrape_in_turns({"small": small_url[1], "large": large_url[1]})
        started = time.perf_counter()
        sql(large_db, _OLD_COUNTS_SQL)
        old_ms = (time.perf_counter() - started) * 1000
    flush_redis()
    small, large = times["small"], times["large"]
    figure(f"metrics scrape, {SMALL} jobs, median", median(small), "ms")
    figure(f"metrics scrape, {SMALL} jobs, p95", percentile(small, 95), "ms")
    figure(f"metrics scrape, {LARGE:,} jobs, median", median(large), "ms")
    figure(f"metrics scrape, {LARGE:,} jobs, p95", percentile(large, 95), "ms")
    figure("metrics scrape, large / small (median)", median(large) / median(small), "x")
    figure(f"old whole-ledger GROUP BY at {LARGE:,} jobs, once", old_ms, "ms")


def _serve(db: str) -> tuple[Proc, str]:
    port = free_port()
    proc = Proc("web", processes.web(port=port, workers=1), service_env(db))
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_ok(f"{base}/healthz"), 60, "the web server")
    return proc, base


def _scrape_in_turns(bases: dict[str, str]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in bases}
    sessions = {name: requests.Session() for name in bases}
    for name, base in bases.items():  # warm: connections, the planner's caches
        for _ in range(5):
            sessions[name].get(f"{base}/metrics", timeout=30).raise_for_status()
    for _ in range(ROUNDS):
        for name, base in bases.items():
            for _ in range(PER_ROUND):
                started = time.perf_counter()
                sessions[name].get(f"{base}/metrics", timeout=30).raise_for_status()
                times[name].append((time.perf_counter() - started) * 1000)
    return times


def build(jobs: int) -> None:
    import django

    django.setup()
    from apps.operators.rollup_runner import rollup_run
    from tests.support.big_ledger import ledger_build

    started = time.monotonic()
    built = ledger_build(jobs=jobs, attempts_per_job=3)
    note(f"ledger: {built.jobs:,} jobs, {built.attempts:,} attempts in {time.monotonic() - started:.0f} s")
    started = time.monotonic()
    folded = 0
    while done := rollup_run(settle_s=0):
        folded += done
    note(f"rollup: {folded:,} attempts folded in {time.monotonic() - started:.0f} s")


if __name__ == "__main__" and sys.argv[1:2] == ["build"]:
    build(int(sys.argv[2]))
