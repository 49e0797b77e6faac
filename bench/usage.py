"""Usage benchmark (FR-50, docs/usage.md): GET /usage for 31 days answered from the per-tenant
daily rollup at 1,000,000 jobs (BENCH_USAGE_JOBS), and for a whole year.

Setup, done by this module itself in a throwaway database (bench/common.py): a ledger of that many
jobs over a week, 10 tenants, about 3 attempts each, written with COPY by
tests/support/big_ledger.py, folded by the rollup task's own work (``rollup_run``), as beat would
have (its time is a figure: the fold now writes the usage rows too). Then the usage table is
filled out to what 13 months of 1,000 tenants leave in it (BENCH_USAGE_TENANTS x 397 days x 4
outcomes of filler rows), so that an answer is read from a full table, not a week's. One real web
server (gunicorn, one process) answers GET /usage over HTTP for the busiest ledger tenant.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import date, timedelta

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

JOBS = int(os.environ.get("BENCH_USAGE_JOBS", "1000000"))
FILLER_TENANTS = int(os.environ.get("BENCH_USAGE_TENANTS", "1000"))
REQUESTS = int(os.environ.get("BENCH_USAGE_REQUESTS", "300"))
RETENTION_DAYS = 397

_FILL_SQL = """
INSERT INTO operators_tenantusageday
       (tenant_id, day, outcome, jobs_submitted, attempts, bytes_stored, rendered_pages)
SELECT t.id, CURRENT_DATE - d, o, 100, 100, 100000, 0
  FROM tenants_tenant AS t, generate_series(0, %s) AS d,
       unnest(ARRAY['succeeded', 'failed_temporary', 'failed_permanent', 'lost']) AS o
 WHERE t.name LIKE 'usage-filler-%%'
ON CONFLICT DO NOTHING
"""


def run() -> None:
    flush_redis()
    with throwaway_database("usage") as db:
        note(
            f"usage: building a ledger of {JOBS:,} jobs, folding it, filling {FILLER_TENANTS:,} tenants' year"
        )
        built = subprocess.run(
            [sys.executable, "-m", "bench.usage", "build", str(JOBS)],
            cwd=ROOT,
            env=service_env(db),
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            sys.stderr.write(built.stdout + built.stderr)
            raise RuntimeError("bench.usage build failed")
        lines = dict(line.split(": ", 1) for line in built.stdout.splitlines() if ": " in line)
        token, fold_s, attempts = lines["token"], float(lines["fold_s"]), int(lines["attempts"])
        (rows,) = sql(db, "SELECT count(*) FROM operators_tenantusageday")[0]
        port = free_port()
        web = Proc("web", processes.web(port=port, workers=1), service_env(db))
        base = f"http://127.0.0.1:{port}"
        with running(web):
            wait_until(lambda: http_ok(f"{base}/healthz"), 60, "the web server")
            month = _timed(base, token, 30)
            year = _timed(base, token, 365)
    flush_redis()
    figure("usage rollup rows in the table", rows)
    figure(f"usage rollup: fold of {attempts:,} attempts (all rollups), attempts/s", attempts / fold_s, "/s")
    figure(f"usage GET 31 days at {JOBS:,} jobs, median", median(month), "ms")
    figure(f"usage GET 31 days at {JOBS:,} jobs, p95", percentile(month, 95), "ms")
    figure(f"usage GET 366 days at {JOBS:,} jobs, median", median(year), "ms")
    figure(f"usage GET 366 days at {JOBS:,} jobs, p95", percentile(year, 95), "ms")


def _timed(base: str, token: str, span_days: int) -> list[float]:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    today = date.today()
    params = {"from": (today - timedelta(days=span_days)).isoformat(), "to": today.isoformat()}
    for _ in range(5):  # warm: the connection, the planner's caches
        session.get(f"{base}/api/v1/usage", params=params, timeout=30).raise_for_status()
    times = []
    for _ in range(REQUESTS):
        started = time.perf_counter()
        r = session.get(f"{base}/api/v1/usage", params=params, timeout=30)
        times.append((time.perf_counter() - started) * 1000)
        r.raise_for_status()
    if not r.json()["totals"]["jobs_submitted"]:
        raise RuntimeError("the usage answer is empty: the fold did not reach the usage rows")
    return times


def build(jobs: int) -> None:
    import django

    django.setup()
    from django.db import connection

    from apps.operators.rollup_runner import rollup_run
    from apps.tenants.models import Tenant
    from apps.tenants.services import tenant_create, token_create
    from tests.support.big_ledger import ledger_build

    started = time.monotonic()
    built = ledger_build(jobs=jobs, attempts_per_job=3)
    print(f"note: ledger of {built.jobs:,} jobs in {time.monotonic() - started:.0f} s", file=sys.stderr)
    started = time.monotonic()
    folded = 0
    while done := rollup_run(settle_s=0):
        folded += done
    print(f"fold_s: {time.monotonic() - started:.3f}")
    print(f"attempts: {folded}")
    for n in range(FILLER_TENANTS):
        tenant_create(name=f"usage-filler-{n}")
    with connection.cursor() as cur:
        cur.execute(_FILL_SQL, [RETENTION_DAYS - 1])
        cur.execute("ANALYZE operators_tenantusageday")
    busiest = Tenant.objects.get(id=built.tenant_ids[0])
    print(f"token: {token_create(tenant=busiest, name='bench', scope='read')}")


if __name__ == "__main__" and sys.argv[1:2] == ["build"]:
    build(int(sys.argv[2]))
