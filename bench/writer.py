"""Writer benchmark (NFR-W1): receipts/s through the leased batching writer against the same
receipts applied one transaction per receipt (what ``receipt_submit`` did before issue #3), side
by side in one run, and the ratio.

Setup, done by this module itself: ``run()`` needs only ``DATABASE_URL`` and ``REDIS_URL`` in the
environment (``make bench`` sets them). It creates a throwaway database ``bench_writer`` on that
PostgreSQL server, migrates it, empties Redis databases N..N+2 of ``REDIS_URL`` (bench/common.py),
then measures in a child process (``python -m bench.writer measure``) with Django configured on
that database, and drops the database at the end. Django need not be configured by the caller.

Workload: running jobs, each with its open attempt 1, and one receipt per job
(70% success with a stored result, 20% temporary failure, 10% permanent failure), so every receipt
moves its job (the expensive case): 20,000 through the writer, then 5,000 more one transaction
each (BENCH_WRITER_RECEIPTS / BENCH_WRITER_BASELINE_RECEIPTS; rates are per receipt, so the two
sides compare even with different counts). Writer settings are the service's defaults unless
set in the environment (BATCH_SIZE 500, CONCURRENCY 4; run it with
SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE=100 for FR-W1 to FR-W4's default).

The writer side runs ``writer_flush_once``, the same drain a nudged or beat-driven flush runs. No
writer process consumes the nudges ``receipt_submit`` sends here; they wait in the broker, which is
emptied at the end. The machine's load average is printed with the figures: on a shared machine
the absolute rate moves with it, the ratio much less.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

from bench.common import ROOT, figure, flush_redis, note, service_env, throwaway_database

RECEIPTS = int(os.environ.get("BENCH_WRITER_RECEIPTS", "20000"))
# The one-transaction-per-receipt side runs on the first BASELINE receipts of an identical
# workload: at a few hundred receipts/s, all 20,000 would take minutes on a shared machine.
BASELINE = min(RECEIPTS, int(os.environ.get("BENCH_WRITER_BASELINE_RECEIPTS", "5000")))


def run() -> None:
    flush_redis()
    with throwaway_database("writer") as db:
        env = service_env(db)
        note(f"writer: {RECEIPTS} receipts through the writer, then {BASELINE} one transaction each")
        done = subprocess.run(
            [sys.executable, "-m", "bench.writer", "measure"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        sys.stdout.write(done.stdout)
        if done.returncode != 0:
            raise RuntimeError(f"bench.writer measure failed:\n{done.stderr[-4000:]}")
    flush_redis()


def _jobs_create(n: int) -> list[str]:
    """``n`` running jobs with their open attempt 1, in bulk (SQL)."""
    from django.db import connection

    from apps.tenants.services import tenant_create

    tenant = tenant_create(name=f"bench-{uuid.uuid4().hex[:6]}").tenant
    ids = [str(uuid.uuid4()) for _ in range(n)]
    t0 = datetime.now(UTC)
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO jobs_job (id, tenant_id, method, url, headers, domain, priority, timeout_s,
                                  max_age_s, max_attempts, attempt_budget, status, attempts,
                                  created_at, started_at, updated_at, lease_owner, lease_expires_at,
                                  published_at)
            SELECT v.id, %s, 'GET', 'http://target.test/' || v.id, '{}'::jsonb, 'target.test',
                   'normal', 30, 0, 5, 5, 'running', 1, %s, %s, %s, 'bench', %s, %s
              FROM unnest(%s::uuid[]) AS v(id)
            """,
            [str(tenant.id), t0, t0, t0, t0 + timedelta(hours=1), t0, ids],
        )
        cur.execute(
            "INSERT INTO jobs_attempt (job_id, number, worker, started_at)"
            " SELECT v.id, 1, 'bench', %s FROM unnest(%s::uuid[]) AS v(id)",
            [t0, ids],
        )
        cur.execute("ANALYZE jobs_job; ANALYZE jobs_attempt")
    return ids


def _receipts(ids: list[str], rng: random.Random) -> list:  # type: ignore[type-arg]
    from apps.jobs.receipts import AttemptFinished, ResultStored

    out = []
    now = time.time()
    for job_id in ids:
        roll = rng.random()
        if roll < 0.7:
            out.append(
                AttemptFinished(
                    job_id=job_id,
                    attempt=1,
                    outcome="succeeded",
                    finished_at=now,
                    duration_ms=120,
                    worker="bench@host",
                    http_status=200,
                    result=ResultStored(
                        key=f"results/{job_id}",
                        size=4096,
                        sha256="ab" * 32,
                        content_type="text/html",
                        http_status=200,
                    ),
                )
            )
        else:
            permanent = roll >= 0.9
            out.append(
                AttemptFinished(
                    job_id=job_id,
                    attempt=1,
                    outcome="failed_permanent" if permanent else "failed_temporary",
                    finished_at=now,
                    duration_ms=80,
                    worker="bench@host",
                    http_status=404 if permanent else 503,
                    error_class="http_4xx" if permanent else "http_5xx",
                    error="HTTP 404" if permanent else "HTTP 503",
                )
            )
    return out


def _measure() -> None:
    import django

    django.setup()
    from django.conf import settings

    from apps.jobs.models import Job, JobStatus
    from apps.jobs.receipt_fold import attempts_apply_finished
    from apps.writer.flush import writer_flush_once
    from apps.writer.selectors import writer_status
    from apps.writer.submit import receipt_submit

    rng = random.Random(7)
    writer_ids, direct_ids = _jobs_create(RECEIPTS), _jobs_create(BASELINE)
    writer_receipts, direct_receipts = _receipts(writer_ids, rng), _receipts(direct_ids, rng)

    t = time.perf_counter()
    for r in writer_receipts:
        receipt_submit(r)
    submit_s = time.perf_counter() - t

    t = time.perf_counter()
    stats = writer_flush_once()
    writer_s = time.perf_counter() - t
    assert stats.acked == RECEIPTS and stats.applied == RECEIPTS, stats
    assert writer_status().stream_length == 0

    t = time.perf_counter()
    for r in direct_receipts:
        attempts_apply_finished([r])
    direct_s = time.perf_counter() - t

    moved = Job.objects.exclude(status=JobStatus.RUNNING).count()
    assert moved == RECEIPTS + BASELINE, moved

    writer_rate, direct_rate = RECEIPTS / writer_s, BASELINE / direct_s
    figure("writer_batch_size", settings.SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE)
    figure("writer_concurrency", settings.SCRAPEJOBS_DATABASE_WRITER_CONCURRENCY)
    figure("writer_receipts", RECEIPTS)
    figure("writer_one_tx_per_receipt_receipts", BASELINE)
    figure("writer_submit_receipts_per_s", RECEIPTS / submit_s)
    figure("writer_batched_receipts_per_s", writer_rate)
    figure("writer_batched_transactions", stats.transactions)
    figure("writer_one_tx_per_receipt_receipts_per_s", direct_rate)
    figure("writer_batched_to_one_tx_ratio", writer_rate / direct_rate)
    figure("writer_loadavg_1m", os.getloadavg()[0])


if __name__ == "__main__" and sys.argv[1:2] == ["measure"]:
    _measure()
elif __name__ == "__main__":
    run()
