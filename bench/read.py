"""Read-side benchmark: ``make bench BENCH=read``.

- GET /jobs/{id} requests/s against the web process with the read cache (the default) next to
  the same command line with it switched off (SCRAPEJOBS_READ_CACHE_TTL_S=0), one run each, same
  database, same closed loop (32 keep-alive clients in 4 processes): the ratio is the figure.
- ?wait= wake-up latency: ``WAITERS`` callers wait (wait=30) on as many running jobs; each job is
  then made final, one at a time, in a transaction that sends the final notice as the writer does;
  the latency is from that commit to the caller's answer (p50, p99).

- target requests for 1,000 identical jobs (issue 10's third read-side figure): bench/singleflight.py,
  run at the end (also on its own: ``make bench BENCH=singleflight``).
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import threading
import time
import uuid

from bench.common import (
    Proc,
    create_tenant,
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

CLIENT_PROCESSES, THREADS_PER_PROCESS = 4, 8
MEASURE_S = float(os.environ.get("BENCH_READ_SECONDS", "10"))
WAITERS = int(os.environ.get("BENCH_READ_WAITERS", "200"))
WEB_WORKERS = 2
FINAL_CHANNEL = "scrapejobs_job_final"  # apps.jobs.final_notices.JOB_FINAL_CHANNEL


def _poll_thread(port: int, token: str, job_id: str, stop: float, out: list[int]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    done = 0
    while time.monotonic() < stop:
        conn.request("GET", f"/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {token}"})
        answer = conn.getresponse()
        answer.read()
        if answer.status == 200:
            done += 1
    out.append(done)


def _poll_process(port: int, token: str, job_id: str, seconds: float, queue: multiprocessing.Queue) -> None:
    stop = time.monotonic() + seconds
    out: list[int] = []
    threads = [
        threading.Thread(target=_poll_thread, args=(port, token, job_id, stop, out))
        for _ in range(THREADS_PER_PROCESS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    queue.put(sum(out))


def _requests_per_s(port: int, token: str, job_id: str) -> float:
    queue: multiprocessing.Queue = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=_poll_process, args=(port, token, job_id, MEASURE_S, queue))
        for _ in range(CLIENT_PROCESSES)
    ]
    for p in procs:
        p.start()
    total = sum(queue.get() for _ in procs)
    for p in procs:
        p.join()
    return total / MEASURE_S


def _serve(name: str, env: dict[str, str], port: int) -> Proc:
    proc = Proc(name, processes.web(port=port, workers=WEB_WORKERS), env)
    wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 60, f"{name} to listen")
    return proc


def _submit(port: int, token: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = f'{{"url": "http://bench.invalid/{uuid.uuid4()}"}}'
    conn.request(
        "POST",
        "/api/v1/jobs",
        body=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    answer = conn.getresponse()
    return str(json.loads(answer.read())["id"])


def _finish_with_notice(db: str, job_id: str) -> None:
    sql(
        db,
        "WITH done AS (UPDATE jobs_job SET status = 'succeeded', finished_at = now() WHERE id = %s "
        "RETURNING id::text) SELECT pg_notify(%s, id) FROM done",
        [job_id, FINAL_CHANNEL],
    )


def _wake_up_latencies(db: str, port: int, token: str) -> list[float]:
    """Seconds from each job's final commit to its waiting caller's answer."""
    jobs = [_submit(port, token) for _ in range(WAITERS)]
    sql(db, "UPDATE jobs_job SET status = 'running' WHERE id = ANY(%s::uuid[]) RETURNING id", [jobs])
    answered: dict[str, float] = {}

    def wait(job_id: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", f"/api/v1/jobs/{job_id}?wait=30", headers={"Authorization": f"Bearer {token}"})
        conn.getresponse().read()
        answered[job_id] = time.monotonic()

    threads = [threading.Thread(target=wait, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    time.sleep(3)  # every caller has read its job and waits
    committed: dict[str, float] = {}
    for job_id in jobs:
        _finish_with_notice(db, job_id)
        committed[job_id] = time.monotonic()
        time.sleep(0.01)
    for t in threads:
        t.join()
    return [answered[j] - committed[j] for j in jobs]


def run() -> None:
    flush_redis()
    with throwaway_database("read") as db:
        env = service_env(db)
        _, token = create_tenant(env)
        cached_port, uncached_port = free_port(), free_port()
        note(
            f"read: GET /jobs/{{id}} of one final job, {CLIENT_PROCESSES * THREADS_PER_PROCESS} closed-loop "
            f"clients for {MEASURE_S:.0f}s, against {WEB_WORKERS} web workers with the read cache and "
            f"without it; then {WAITERS} ?wait=30 callers woken one by one"
        )
        with running(
            _serve("cached", env, cached_port),
            _serve("uncached", dict(env, SCRAPEJOBS_READ_CACHE_TTL_S="0"), uncached_port),
        ):
            job_id = _submit(cached_port, token)
            _finish_with_notice(db, job_id)
            with_cache = _requests_per_s(cached_port, token, job_id)
            without_cache = _requests_per_s(uncached_port, token, job_id)
            figure("read_with_cache_requests_per_s", with_cache)
            figure("read_without_cache_requests_per_s", without_cache)
            figure("read_cache_ratio", with_cache / max(without_cache, 1e-9), "x")
            latencies = _wake_up_latencies(db, cached_port, token)
            figure("read_wait_wakeup_p50_ms", median(latencies) * 1000)
            figure("read_wait_wakeup_p99_ms", percentile(latencies, 99) * 1000)
    # One fetch for 1,000 identical jobs: bench/singleflight.py.
    from bench import singleflight

    singleflight.run()
