"""Re-fetching benchmark (FR-35, docs/revalidation.md): 1,000 unchanged pages re-fetched through
the real stack (writer, beat and worker processes on a throwaway database), once as plain jobs and
once with ``revalidate``, against a local target that honours conditional requests
(tests/support/conditional_target.py, a process of its own). Every page is fetched once first, so
both rounds re-fetch pages the tenant has. Prints, for each round, the body bytes the target sent,
the target's CPU, the service's CPU per job (worker, writer, beat, PostgreSQL, Redis) and the
304s, then the ratios. ``make bench BENCH=revalidate``; ``BENCH_REVALIDATE_PAGES`` (1,000) and
``BENCH_REVALIDATE_BYTES`` (64 KiB) set the pages and their size.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

from bench.common import (
    ROOT,
    Proc,
    celery_ready,
    create_tenant,
    figure,
    free_port,
    http_ok,
    note,
    running,
    service_env,
    sql,
    target_stats,
    throwaway_database,
    wait_until,
)
from bench.cpu import CpuMeter, service_classifier
from bench.singleflight import _flush_stack_redis
from scrapejobs import processes

PAGES = int(os.environ.get("BENCH_REVALIDATE_PAGES", "1000"))
SIZE = int(os.environ.get("BENCH_REVALIDATE_BYTES", str(64 * 1024)))
CONCURRENCY = 20
TIMEOUT_S = 600
TARGET_MODULE = "tests.support.conditional_target"
SERVICE_KINDS = ("worker", "writer", "beat", "postgres", "redis")


def run() -> None:
    _flush_stack_redis()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    target = Proc(
        "conditional-target", [sys.executable, "-m", TARGET_MODULE, str(port), str(SIZE)], dict(os.environ)
    )
    results = Path(tempfile.mkdtemp(prefix="bench-results-"))
    try:
        wait_until(lambda: http_ok(base + "/stats"), 10, "the conditional target")
        note(f"revalidate: {PAGES} unchanged pages of {SIZE} bytes, re-fetched plain and with revalidate")
        with throwaway_database("revalidate") as db:
            env = service_env(
                db, SCRAPEJOBS_WORKER_CONCURRENCY=str(CONCURRENCY), SCRAPEJOBS_RESULTS_DIR=str(results)
            )
            tenant_id, _token = create_tenant(env)
            procs = (
                Proc("control", processes.control(), env),
                Proc("beat", processes.beat(schedule_file=str(results / "celerybeat-schedule")), env),
                Proc("worker", processes.worker(concurrency=CONCURRENCY), env),
            )
            submit = [sys.executable, "-m", "bench.revalidate", "submit", tenant_id, base, str(PAGES)]
            # Its stdin closed on the way out, the submitter ends (and is waited for).
            with (
                subprocess.Popen(
                    submit, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                ) as submitter,
                running(*procs) as (writer, _beat, worker),
            ):
                wait_until(lambda: celery_ready(writer) and celery_ready(worker), 60, "writer and worker")
                _round(db, submitter, revalidate=False, done=0)  # every page fetched once
                classify = service_classifier(
                    "bench_revalidate", submit="bench.revalidate", target=TARGET_MODULE
                )
                measured = {}
                for n, (name, revalidate) in enumerate((("plain", False), ("revalidate", True)), start=1):
                    before = target_stats(base)
                    with CpuMeter(classify) as meter:
                        _round(db, submitter, revalidate=revalidate, done=n * PAGES)
                    after = target_stats(base)
                    cpu = meter.totals()
                    measured[name] = {
                        "bytes": after["bytes_sent"] - before["bytes_sent"],
                        "not_modified": after["not_modified"] - before["not_modified"],
                        "target_cpu_ms": cpu.get("target", 0.0) * 1000,
                        "service_cpu_ms_per_job": sum(cpu.get(k, 0.0) for k in SERVICE_KINDS) * 1000 / PAGES,
                    }
                succeeded = sql(db, "SELECT count(*) FROM jobs_job WHERE status = 'succeeded'")[0][0]
                stored = sql(db, "SELECT count(DISTINCT result_key) FROM jobs_job")[0][0]
    finally:
        target.stop()
        shutil.rmtree(results, ignore_errors=True)
        _flush_stack_redis()
    figure("revalidate_pages", PAGES)
    figure("revalidate_page_bytes", SIZE)
    figure("revalidate_jobs_succeeded", succeeded)
    figure("revalidate_bodies_stored", stored)
    for name, m in measured.items():
        figure(f"revalidate_{name}_bytes_received", m["bytes"])
        figure(f"revalidate_{name}_304s", m["not_modified"])
        figure(f"revalidate_{name}_target_cpu_ms", round(m["target_cpu_ms"], 1))
        figure(f"revalidate_{name}_service_cpu_ms_per_job", round(m["service_cpu_ms_per_job"], 3))
    plain, reval = measured["plain"], measured["revalidate"]
    figure("revalidate_bytes_ratio", round(reval["bytes"] / max(plain["bytes"], 1), 4))
    figure(
        "revalidate_target_cpu_ratio", round(reval["target_cpu_ms"] / max(plain["target_cpu_ms"], 1e-9), 3)
    )
    figure(
        "revalidate_service_cpu_per_job_ratio",
        round(reval["service_cpu_ms_per_job"] / max(plain["service_cpu_ms_per_job"], 1e-9), 3),
    )


def _round(db: str, submitter: subprocess.Popen[str], *, revalidate: bool, done: int) -> None:
    """Have the submitter add one job per page, and wait until every job so far (``done``
    before, these after) is final."""
    assert submitter.stdin is not None and submitter.stdout is not None
    submitter.stdin.write("1\n" if revalidate else "0\n")
    submitter.stdin.flush()
    if submitter.stdout.readline().strip() != "submitted":
        raise RuntimeError(f"the submitter stopped (exit {submitter.poll()})")
    final = "SELECT count(*) FROM jobs_job WHERE status IN ('succeeded', 'failed', 'cancelled')"
    wait_until(lambda: sql(db, final)[0][0] >= done + PAGES, TIMEOUT_S, "every job to be final", 0.05)


def _submit(tenant_id: str, base: str, n: int) -> None:
    """``python -m bench.revalidate submit TENANT BASE N``: for each line read (``0`` plain, ``1``
    with revalidate), one job per page from 4 threads, then ``submitted`` (one process for every
    round: Django is set up once)."""
    import django

    django.setup()
    from django.db import connection

    from apps.jobs.intake import job_create

    tenant = uuid.UUID(tenant_id)

    def some(pages: range, revalidate: bool) -> None:
        try:
            for i in pages:
                job_create(
                    tenant_id=tenant, url=f"{base}/page/{i}", domain="127.0.0.1", revalidate=revalidate
                )
        finally:
            connection.close()

    for line in sys.stdin:
        revalidate = line.strip() == "1"
        threads = [threading.Thread(target=some, args=(range(i, n, 4), revalidate)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("submitted", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["submit"]:
        _submit(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        run()
