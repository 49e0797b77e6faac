"""Single-flight benchmark: 1,000 identical jobs (``max_age_s`` 60) against a
local target that takes 0.5 s to answer, through the real stack (writer, beat and worker processes
on a throwaway database; jobs submitted with ``job_create``, the API's INSERT, from a process of
their own). Prints how many requests reached the target (aim: 1) and the time from the first
submit until every job is final. ``make bench BENCH=singleflight``; bench/read.py calls ``run()``.

The target runs in this process (its request count is read directly): it answers about one
request, so it competes for nothing.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bench.common import (
    Proc,
    create_tenant,
    figure,
    note,
    redis_url_db,
    running,
    service_env,
    sql,
    throwaway_database,
    wait_until,
)
from scrapejobs import processes

JOBS = int(os.environ.get("BENCH_SINGLEFLIGHT_JOBS", "1000"))
CONCURRENCY = 100  # the worker's default
TIMEOUT_S = 600
PATH = "/bytes/4096"


def run() -> None:
    from tests.support.target import TargetServer

    _flush_stack_redis()
    target = TargetServer().start()
    try:
        url = f"{target.base_url}{PATH}?delay=0.5"
        note(f"singleflight: {JOBS} identical jobs (max_age_s 60) against a target answering in 0.5 s")
        drain_s, counts = _drain(url)
        figure("read_singleflight_jobs", JOBS)
        figure("read_singleflight_succeeded", counts.get("succeeded", 0))
        figure("read_singleflight_target_requests", len(target.requests_for(PATH)))
        figure("read_singleflight_drain_s", drain_s)
        figure("read_singleflight_jobs_per_s", JOBS / drain_s)
    finally:
        target.stop()
        _flush_stack_redis()


def _flush_stack_redis() -> None:
    """Empty the two Redis databases the stack uses (REDIS_URL's and the broker's, the next one),
    and only those: the next ones may be someone else's."""
    import redis

    base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    for offset in (0, 1):
        redis.Redis.from_url(redis_url_db(base, offset)).flushdb()


def _drain(url: str) -> tuple[float, dict[str, int]]:
    """Submit the jobs and wait until every one is final: (seconds, jobs by status)."""
    results = Path(tempfile.mkdtemp(prefix="bench-results-"))
    with throwaway_database("singleflight") as db:
        env = service_env(
            db, SCRAPEJOBS_WORKER_CONCURRENCY=str(CONCURRENCY), SCRAPEJOBS_RESULTS_DIR=str(results)
        )
        tenant_id, _token = create_tenant(env)
        procs = (
            Proc("control", processes.control(), env),
            Proc("beat", processes.beat(schedule_file=str(results / "celerybeat-schedule")), env),
            Proc("worker", processes.worker(concurrency=CONCURRENCY), env),
        )
        try:
            with running(*procs) as (writer, _beat, worker):
                wait_until(lambda: _ready(writer) and _ready(worker), 60, "writer and worker")
                submit = Proc(
                    "submit",
                    [sys.executable, "-m", "bench.singleflight", "submit", tenant_id, url, str(JOBS)],
                    env,
                )
                wait_until(lambda: submit.p.poll() is not None, TIMEOUT_S, "the submissions")
                if submit.p.returncode != 0:
                    raise RuntimeError(submit.output())
                started = float(submit.output().split()[0])
                final = "SELECT count(*) FROM jobs_job WHERE status IN ('succeeded', 'failed', 'cancelled')"
                wait_until(lambda: sql(db, final)[0][0] >= JOBS, TIMEOUT_S, "every job to be final", 0.05)
                elapsed = time.time() - started
        finally:
            shutil.rmtree(results, ignore_errors=True)
        counts = dict(sql(db, "SELECT status, count(*) FROM jobs_job GROUP BY status"))
    return elapsed, counts


def _ready(proc: Proc) -> bool:
    if proc.p.poll() is not None:
        raise RuntimeError(f"{proc.name} exited:\n{proc.output()[-3000:]}")
    return " ready." in proc.output()


def _submit(tenant_id: str, url: str, n: int) -> None:
    """``python -m bench.singleflight submit TENANT URL N``: the jobs, from 8 threads at once, as
    many API requests would arrive (run by ``run()`` with the benchmark's env)."""
    import django

    django.setup()
    from django.db import connection

    from apps.jobs.intake import job_create

    tenant = uuid.UUID(tenant_id)
    host = url.split("/")[2].split(":")[0]

    def some(count: int) -> None:
        try:
            for _ in range(count):
                job_create(tenant_id=tenant, url=url, domain=host, max_age_s=60)
        finally:
            connection.close()

    started = time.time()
    threads = [threading.Thread(target=some, args=(n // 8 + (i < n % 8),)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(started, time.time(), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["submit"]:
        _submit(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        run()
