"""/metrics benchmark (issue 13): the cost of one scrape with 10 jobs in the ledger and with
1,000,000 jobs and about 3,000,000 attempts (BENCH_METRICS_JOBS), in one run, and their ratio
(the promise: within 2x). For contrast, the whole-ledger GROUP BY that /metrics ran before issue 13
is timed once on the large ledger.

Setup, done by this module itself: a throwaway database ``bench_metrics`` on DATABASE_URL's server
(bench/common.py), measured in a child process (``python -m bench.metrics measure``). The ledger is
written with COPY by tests/support/big_ledger.py (a week of jobs: mostly succeeded, dead letters
over several error classes and 200 domains, some queued and running), then the rollup task's work
(``rollup_run``) folds every settled attempt in, as beat would have over that week. Each scrape is
a GET /metrics through Django's whole middleware stack (django.test.Client, in process), so the
figures are the view's cost, without a network hop or a server's queueing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.common import ROOT, figure, flush_redis, median, note, percentile, service_env, throwaway_database

SMALL = 10
LARGE = int(os.environ.get("BENCH_METRICS_JOBS", "1000000"))
SCRAPES = int(os.environ.get("BENCH_METRICS_SCRAPES", "200"))

_OLD_COUNTS_SQL = """
SELECT status, count(*),
       EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 'queued')),
       count(*) FILTER (WHERE status = 'running' AND lease_expires_at < now())
  FROM jobs_job GROUP BY status
"""


def run() -> None:
    flush_redis()
    with throwaway_database("metrics") as db:
        note(f"metrics: /metrics with {SMALL} jobs, then with {LARGE:,} jobs, {SCRAPES} scrapes each")
        done = subprocess.run(
            [sys.executable, "-m", "bench.metrics", "measure"], cwd=ROOT, env=service_env(db), text=True
        )
        if done.returncode != 0:
            raise RuntimeError("bench.metrics measure failed")
    flush_redis()


def _scrape_ms() -> list[float]:
    from django.test import Client

    client = Client()
    for _ in range(5):  # warm: connections, templates, the planner's caches
        assert client.get("/metrics").status_code == 200
    times = []
    for _ in range(SCRAPES):
        started = time.perf_counter()
        response = client.get("/metrics")
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    return times


def _ledger_and_rollup(jobs: int) -> None:
    from apps.operators.rollups import rollup_run
    from tests.support.big_ledger import ledger_build

    started = time.monotonic()
    built = ledger_build(jobs=jobs, attempts_per_job=3)
    note(f"ledger: {built.jobs:,} jobs, {built.attempts:,} attempts in {time.monotonic() - started:.0f} s")
    started = time.monotonic()
    folded = 0
    while done := rollup_run(settle_s=0):
        folded += done
    note(f"rollup: {folded:,} attempts folded in {time.monotonic() - started:.0f} s")


def measure() -> None:
    import django

    django.setup()
    from django.db import connection

    _ledger_and_rollup(SMALL)
    small = _scrape_ms()
    _ledger_and_rollup(LARGE - SMALL)
    large = _scrape_ms()
    with connection.cursor() as cur:
        started = time.perf_counter()
        cur.execute(_OLD_COUNTS_SQL)
        cur.fetchall()
        old_ms = (time.perf_counter() - started) * 1000

    figure(f"metrics scrape, {SMALL} jobs, median", median(small), "ms")
    figure(f"metrics scrape, {SMALL} jobs, p95", percentile(small, 95), "ms")
    figure(f"metrics scrape, {LARGE:,} jobs, median", median(large), "ms")
    figure(f"metrics scrape, {LARGE:,} jobs, p95", percentile(large, 95), "ms")
    figure("metrics scrape, large / small (median)", median(large) / median(small), "x")
    figure(f"old whole-ledger GROUP BY at {LARGE:,} jobs, once", old_ms, "ms")


if __name__ == "__main__" and sys.argv[1:] == ["measure"]:
    measure()
