"""How many fetches one worker process holds (NFR-18, seed step 9: "has to be measured").

One worker process (scrapejobs/processes.py's command line) with a pool of C slots, for each C of
``BENCH_CAPACITY_LEVELS`` (100, 300 and 1,000), against bench/slow_target.py answering after
``BENCH_CAPACITY_TARGET_S`` (10 s). Jobs are submitted at Little's-law rate C / latency (10, 30
and 100 jobs/s) by a separate process (``job_create`` on a fixed schedule: this measures the
worker, bench/intake.py and bench/peak.py measure the API), for a warm-up of twice the latency
and then ``BENCH_CAPACITY_SECONDS`` (60) measured. The writer and beat run beside it, as deployed.

Per level, over the measured window (steady state: the pool filled one latency after the start):

- jobs/s: jobs whose attempt finished in the window (their ``finished_at``), over its length
- share of Little's law: jobs/s x latency / C (1.0: every slot busy waiting on the target; what is
  lost is time spent outside the fetch, or slots the process cannot keep busy)
- fetches in flight: the target's own count of open requests, its mean over the window
- CPU per job: the worker process, and every process of the service (bench/cpu.py), per job
- memory: the worker's RSS idle (started, no job yet) and its median over the window; per fetch in
  flight, the growth over idle divided by the fetches in flight

``BENCH_CAPACITY_POOL`` (``threads``, the worker's default; or ``gevent`` where gevent is
installed) sets the worker's Celery pool, to measure an event-loop fetcher against threads.
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
    celery_ready,
    create_tenant,
    figure,
    flush_redis,
    littles_law_share,
    median,
    note,
    rss_mib,
    running,
    service_env,
    sql,
    start_slow_target,
    target_stats,
    throwaway_database,
    wait_until,
)
from bench.cpu import CpuMeter, service_classifier
from scrapejobs import processes

LEVELS = [int(x) for x in os.environ.get("BENCH_CAPACITY_LEVELS", "100,300,1000").split(",") if x.strip()]
TARGET_S = float(os.environ.get("BENCH_CAPACITY_TARGET_S", "10"))
MEASURE_S = float(os.environ.get("BENCH_CAPACITY_SECONDS", "60"))
POOL = os.environ.get("BENCH_CAPACITY_POOL", "threads")
WARMUP_S = 2 * TARGET_S
BODY_BYTES = 4096
DATABASE = "bench_capacity"
SHARE_AIM = 0.9


def worker_argv(concurrency: int, pool: str) -> list[str]:
    """The worker's command line with its Celery pool replaced by ``pool``."""
    argv = processes.worker(concurrency=concurrency)
    argv[argv.index("--pool") + 1] = pool
    return argv


def _sample(stop: threading.Event, worker: Proc, target: str, rss: list[float], in_flight: list[int]) -> None:
    while not stop.wait(1.0):
        rss.append(rss_mib(worker.p.pid))
        in_flight.append(int(target_stats(target).get("in_flight", 0)))


def _level(db: str, env: dict[str, str], tenant_id: str, target: str, concurrency: int) -> dict[str, float]:
    rate = concurrency / TARGET_S
    level_env = dict(env, SCRAPEJOBS_WORKER_CONCURRENCY=str(concurrency))
    worker = Proc(f"worker-{concurrency}", worker_argv(concurrency, POOL), level_env)
    with running(worker):
        wait_until(lambda: celery_ready(worker), 120, "the worker")
        idle_rss = rss_mib(worker.p.pid)
        before = int(sql(db, "SELECT count(*) FROM jobs_job")[0][0])
        start = time.time() + 1.0
        window = (start + WARMUP_S, start + WARMUP_S + MEASURE_S)
        submit = Proc(
            "submit",
            [
                sys.executable,
                "-m",
                "bench.capacity",
                "submit",
                tenant_id,
                target,
                str(rate),
                str(WARMUP_S + MEASURE_S),
                str(start),
            ],
            level_env,
        )
        with running(submit):
            time.sleep(max(0.0, window[0] - time.time()))
            rss: list[float] = []
            in_flight: list[int] = []
            stop = threading.Event()
            sampler = threading.Thread(
                target=_sample, args=(stop, worker, target, rss, in_flight), daemon=True
            )
            sampler.start()
            with CpuMeter(service_classifier(DATABASE, submit="bench.capacity submit")) as meter:
                time.sleep(max(0.0, window[1] - time.time()))
            stop.set()
            sampler.join()
            wait_until(lambda: submit.p.poll() is not None, 120, "the submissions", 0.5)
            if submit.p.returncode != 0:
                raise RuntimeError(submit.output()[-3000:])
            submitted = int(submit.output().split()[-1])
        # The jobs still in flight end one latency after the last submission; bounded wait.
        final = "SELECT count(*) FROM jobs_job WHERE status IN ('succeeded', 'failed', 'cancelled')"
        try:
            wait_until(
                lambda: sql(db, final)[0][0] >= before + submitted, TARGET_S * 3 + 120, "the jobs", 1.0
            )
        except RuntimeError as e:
            note(str(e))
        done = sql(
            db,
            "SELECT count(*) FROM jobs_job WHERE finished_at >= to_timestamp(%s) AND finished_at < to_timestamp(%s)",
            window,
        )[0][0]
        counts = dict(sql(db, "SELECT status, count(*) FROM jobs_job GROUP BY status"))
    jobs_per_s = int(done) / MEASURE_S
    cpu = meter.totals()
    mean_rss = median(rss)
    mean_in_flight = sum(in_flight) / len(in_flight) if in_flight else float("nan")
    jobs = max(int(done), 1)
    return {
        "submit_rate_per_s": rate,
        "submitted": submitted,
        "jobs_per_s": jobs_per_s,
        "share_of_littles_law": littles_law_share(jobs_per_s, concurrency=concurrency, latency_s=TARGET_S),
        "fetches_in_flight_mean": mean_in_flight,
        "fetches_in_flight_share": mean_in_flight / concurrency,
        "cpu_ms_per_job_worker": cpu.get("worker", 0.0) * 1000 / jobs,
        "cpu_ms_per_job_total": sum(cpu.values()) * 1000 / jobs,
        "worker_cpu_share_of_a_core": cpu.get("worker", 0.0) / MEASURE_S,
        "worker_rss_idle_mib": idle_rss,
        "worker_rss_mib": mean_rss,
        "worker_mib_per_fetch_in_flight": (mean_rss - idle_rss) / max(mean_in_flight, 1),
        "succeeded_total": int(counts.get("succeeded", 0)),
        "not_succeeded_total": sum(int(n) for s, n in counts.items() if s != "succeeded"),
    }


def run() -> None:
    note(
        f"capacity: one worker process ({POOL} pool) at {', '.join(map(str, LEVELS))} slots, target "
        f"answering after {TARGET_S:g} s, submitted at Little's-law rate; {WARMUP_S:g} s warm-up, "
        f"{MEASURE_S:g} s measured each"
    )
    figure("capacity_loadavg_1m_before", os.getloadavg()[0])
    figure("capacity_target_s", TARGET_S)
    figure("capacity_pool", POOL)
    flush_redis()
    results = Path(tempfile.mkdtemp(prefix="bench-capacity-results-"))
    target_proc, target = start_slow_target()
    try:
        with running(target_proc), throwaway_database("capacity") as db:
            env = service_env(db, SCRAPEJOBS_RESULTS_DIR=str(results))
            tenant_id, _token = create_tenant(env)
            schedule = str(results / "celerybeat-schedule")
            with running(
                Proc("control", processes.control(), env),
                Proc("beat", processes.beat(schedule_file=schedule), env),
            ) as (
                writer,
                _beat,
            ):
                wait_until(lambda: celery_ready(writer), 120, "the writer")
                for concurrency in LEVELS:
                    figures = _level(db, env, tenant_id, target, concurrency)
                    for name, value in figures.items():
                        figure(f"capacity_{concurrency}_{name}", value)
                    held = figures["share_of_littles_law"] >= SHARE_AIM
                    figure(f"capacity_{concurrency}_holds", "yes" if held else "no")
    finally:
        shutil.rmtree(results, ignore_errors=True)
    figure("capacity_loadavg_1m_after", os.getloadavg()[0])


def _submit(tenant_id: str, target: str, rate: float, seconds: float, start: float) -> None:
    """``python -m bench.capacity submit TENANT TARGET RATE SECONDS START``: ``job_create`` on a
    fixed schedule from START (unix time); prints the number of jobs created."""
    import django  # noqa: PLC0415

    django.setup()
    from apps.jobs.intake import job_create  # noqa: PLC0415

    tenant = uuid.UUID(tenant_id)
    n = int(rate * seconds)
    for i in range(n):
        time.sleep(max(0.0, start + i / rate - time.time()))
        url = f"{target}/bytes/{BODY_BYTES}?n={uuid.uuid4().hex}&delay={TARGET_S:g}"
        job_create(tenant_id=tenant, url=url, domain="127.0.0.1")
    print(n, flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["submit"]:
        _submit(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]))
    else:
        run()
