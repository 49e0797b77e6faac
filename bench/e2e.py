"""End-to-end benchmark (issue 2 item 9b, NFR-8): 2,000 jobs against a local target through
the whole service, next to a naive baseline measured in the same run, at each target latency of
``BENCH_E2E_LATENCIES_MS`` (default ``0,500``: a local target answering at once, and one answering
in half a second as real sites do). For a latency L > 0 it also prints the share of Little's law
reached: a pool of C threads can finish at most C / L jobs per second.

- scrapejobs: writer, beat and worker processes (scrapejobs/processes.py command lines) on a
  throwaway database. Jobs are submitted with ``job_create`` in a loop from one process (the same
  single INSERT the API makes, without HTTP: the intake benchmark measures HTTP), then published
  by the outbox publisher, claimed, fetched, stored, and recorded through the writer. Measured from
  the first submit to the moment the last job is final in the database.
- naive: ``bench/naive_app.py``, a bare Celery task doing ``requests.get`` and writing the body to
  disk, same pool (threads) and concurrency; from the first ``delay()`` to the last file written.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import (
    Proc,
    celery_ready,
    create_tenant,
    figure,
    flush_redis,
    note,
    redis_url_db,
    running,
    service_env,
    sql,
    start_target,
    throwaway_database,
    wait_until,
)
from bench.cpu import CpuMeter
from scrapejobs import processes

JOBS = int(os.environ.get("BENCH_E2E_JOBS", "2000"))
CONCURRENCY = int(os.environ.get("BENCH_E2E_CONCURRENCY", "100"))  # the worker's default
BODY_BYTES = 4096
TIMEOUT_S = 600
# The processes whose CPU a job costs, like for like (bench/cpu.py kinds, the submitter excluded).
SERVICE_KINDS = ("worker", "writer", "beat", "postgres", "redis", "target")
NAIVE_KINDS = ("naive_worker", "redis", "target")
LATENCIES_MS = [int(x) for x in os.environ.get("BENCH_E2E_LATENCIES_MS", "0,500").split(",") if x.strip()]


def _url(target: str, i: int, latency_ms: int) -> str:
    delay = f"&delay={latency_ms / 1000}" if latency_ms else ""
    return f"{target}/bytes/{BODY_BYTES}?n={i}{delay}"


def _classify(pid: int, cmdline: str, environ: dict[str, str]) -> str | None:
    """The kinds of process whose CPU a job costs (bench/cpu.py)."""
    if cmdline.startswith("postgres: "):
        return "postgres" if " bench_e2e " in cmdline else None  # the backends of our database
    if "redis-server" in cmdline:
        return "redis"  # shared with anything else using that server
    if "bench.common target" in cmdline:
        return "target"
    if "bench.naive_app" in cmdline:
        return "naive_worker"
    if not environ.get("DATABASE_URL", "").endswith("/bench_e2e"):
        return None
    if "bench.e2e submit" in cmdline:
        return "submit"
    if " beat " in cmdline:
        return "beat"
    if "--queues jobs." in cmdline:
        return "worker"
    if "--queues control" in cmdline:
        return "writer"
    return None


def _naive(target: str, latency_ms: int) -> tuple[float, dict[str, float]]:
    broker = redis_url_db(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), 2)
    env = dict(os.environ, NAIVE_BROKER_URL=broker, PYTHONUNBUFFERED="1")
    out = Path(tempfile.mkdtemp(prefix="bench-naive-"))
    argv = [
        str(Path(sys.executable).parent / "celery"),
        "-A",
        "bench.naive_app",
        "worker",
        "--loglevel",
        "INFO",
        "--queues",
        "naive",
        "--pool",
        "threads",
        "--concurrency",
        str(CONCURRENCY),
        "--without-mingle",
        "--without-gossip",
    ]
    os.environ["NAIVE_BROKER_URL"] = broker
    from bench.naive_app import fetch

    try:
        with running(Proc("naive-worker", argv, env)) as (worker,):
            wait_until(lambda: celery_ready(worker), 60, "the naive worker")
            with CpuMeter(_classify) as meter:
                started = time.time()
                for i in range(JOBS):
                    fetch.delay(_url(target, i, latency_ms), str(out / f"{i}.body"))
                wait_until(
                    lambda: sum(1 for p in out.iterdir() if p.suffix == ".body") >= JOBS,
                    TIMEOUT_S,
                    "the naive jobs",
                    interval=0.05,
                )
                elapsed = time.time() - started
            return JOBS / elapsed, meter.totals()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _scrapejobs(target: str, latency_ms: int, *, jobs: int = JOBS) -> tuple[float, dict[str, int], CpuMeter]:
    """Throughput (jobs/s), jobs per final status, and the meter of the run (CPU, memory)."""
    results = Path(tempfile.mkdtemp(prefix="bench-results-"))
    with throwaway_database("e2e") as db:
        env = service_env(
            db, SCRAPEJOBS_WORKER_CONCURRENCY=str(CONCURRENCY), SCRAPEJOBS_RESULTS_DIR=str(results)
        )
        tenant_id, _token = create_tenant(env)
        schedule = str(results / "celerybeat-schedule")
        procs = (
            Proc("control", processes.control(), env),
            Proc("beat", processes.beat(schedule_file=schedule), env),
            Proc("worker", processes.worker(concurrency=CONCURRENCY), env),
        )
        try:
            with running(*procs) as (writer, _beat, worker):
                wait_until(lambda: celery_ready(writer) and celery_ready(worker), 60, "writer and worker")
                meter = CpuMeter(_classify).__enter__()
                submit = Proc(
                    "submit",
                    [
                        sys.executable,
                        "-m",
                        "bench.e2e",
                        "submit",
                        tenant_id,
                        target,
                        str(jobs),
                        str(latency_ms),
                    ],
                    env,
                )
                wait_until(lambda: submit.p.poll() is not None, TIMEOUT_S, "the submissions")
                if submit.p.returncode != 0:
                    raise RuntimeError(submit.output())
                started = float(submit.output().split()[0])
                submit.stop()
                final = "SELECT count(*) FROM jobs_job WHERE status IN ('succeeded', 'failed', 'cancelled')"
                wait_until(lambda: sql(db, final)[0][0] >= jobs, TIMEOUT_S, "every job to be final", 0.05)
                elapsed = time.time() - started
                meter.__exit__()
        finally:
            shutil.rmtree(results, ignore_errors=True)
        counts = dict(sql(db, "SELECT status, count(*) FROM jobs_job GROUP BY status"))
    return jobs / elapsed, counts, meter


def run() -> None:
    flush_redis()
    target_proc, target = start_target()
    with running(target_proc):
        figure("e2e_jobs", JOBS)
        figure("e2e_worker_concurrency", CONCURRENCY)
        for latency_ms in LATENCIES_MS:
            note(
                f"e2e: {JOBS} jobs of {BODY_BYTES} bytes, target latency {latency_ms} ms, thread pool of "
                f"{CONCURRENCY}, naive baseline first"
            )
            naive, naive_cpu = _naive(target, latency_ms)
            flush_redis()
            ours, counts, meter = _scrapejobs(target, latency_ms)
            ours_cpu = meter.totals()
            flush_redis()
            tag = f"e2e_{latency_ms}ms"
            figure(f"{tag}_scrapejobs_jobs_per_s", ours)
            figure(f"{tag}_scrapejobs_succeeded", counts.get("succeeded", 0))
            figure(f"{tag}_naive_jobs_per_s", naive)
            figure(f"{tag}_scrapejobs_to_naive_ratio", ours / naive)
            if latency_ms:
                ceiling = CONCURRENCY / (latency_ms / 1000)
                figure(f"{tag}_littles_law_jobs_per_s", ceiling)
                figure(f"{tag}_scrapejobs_share_of_littles_law", ours / ceiling)
                figure(f"{tag}_naive_share_of_littles_law", naive / ceiling)
            # What a job costs in CPU, per process kind (bench/cpu.py): the coarse profile.
            for side, cpu in (("scrapejobs", ours_cpu), ("naive", naive_cpu)):
                for kind, seconds in sorted(cpu.items()):
                    figure(f"{tag}_{side}_cpu_ms_per_job_{kind}", seconds * 1000 / JOBS)
                figure(f"{tag}_{side}_cpu_ms_per_job_total", sum(cpu.values()) * 1000 / JOBS)
            # Like for like (NFR-11): the processes each side needs to run a job, the submitting
            # one left out on both. Only the naive side's own kinds count for it: another
            # checkout's benchmark running on the machine meanwhile may match the service's kinds.
            ours_service = sum(ours_cpu.get(k, 0.0) for k in SERVICE_KINDS) * 1000 / JOBS
            naive_service = sum(naive_cpu.get(k, 0.0) for k in NAIVE_KINDS) * 1000 / JOBS
            figure(f"{tag}_scrapejobs_cpu_ms_per_job_service", ours_service)
            figure(f"{tag}_naive_cpu_ms_per_job_service", naive_service)
            figure(f"{tag}_cpu_per_job_to_naive_ratio", ours_service / naive_service)


def _submit(tenant_id: str, target: str, n: int, latency_ms: int) -> None:
    """``python -m bench.e2e submit TENANT TARGET N LATENCY_MS`` (run by ``run()`` with the
    benchmark's env)."""
    import django

    django.setup()
    from apps.jobs.intake import job_create

    tenant = uuid.UUID(tenant_id)
    started = time.time()
    for i in range(n):
        job_create(tenant_id=tenant, url=_url(target, i, latency_ms), domain="127.0.0.1")
    print(started, time.time(), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["submit"]:
        _submit(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        run()
