"""Intake benchmark (issue 2 item 9a, NFR-2): POST /jobs throughput and latency with 32
concurrent keep-alive clients against gunicorn serving the real app, next to a bare Django view
that only inserts one row (bench/bare_app.py), same gunicorn command line, same database.

Prints requests/s, p50 and p99 for both and the ratio. Rate limiting is off for the benchmark.
Clients: 4 processes x 8 threads, each thread one keep-alive ``http.client`` connection.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import threading
import time

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
    throwaway_database,
    wait_until,
)
from scrapejobs import processes

CLIENT_PROCESSES = 4
THREADS_PER_PROCESS = 8  # 32 concurrent clients in all
WARMUP_S = float(os.environ.get("BENCH_INTAKE_WARMUP_S", "2"))
MEASURE_S = float(os.environ.get("BENCH_INTAKE_SECONDS", "10"))
WEB_WORKERS, WEB_THREADS = 2, 16  # the default web command line on this 2-core machine
# A steady load for the latency promise: well above the seed's peak of 28 jobs/s.
PACED_RATE = float(os.environ.get("BENCH_INTAKE_PACED_RATE", "100"))


def _client_thread(
    port: int, token: str, start: float, stop: float, tag: str, out: list, interval: float
) -> None:
    """Closed loop (``interval`` 0: the next request as soon as the answer came) or paced (one
    request every ``interval`` s on a fixed schedule; latency counts from the scheduled time, so a
    slow answer that delays the next request is not hidden)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    i = 0
    # Spread the paced clients over one interval so that they do not fire together.
    scheduled = time.time() + (hash(tag) % 1000) / 1000 * interval
    while True:
        if interval:
            scheduled += interval
            time.sleep(max(0.0, scheduled - time.time()))
            t0 = scheduled
        else:
            t0 = time.time()
        if t0 >= stop:
            break
        i += 1
        body = json.dumps({"url": f"https://shop.example/{tag}/{i}"})
        try:
            conn.request("POST", "/api/v1/jobs", body=body, headers=headers)
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 202
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            ok = False
        t1 = time.time()
        if t0 >= start and t1 <= stop:
            out.append((t1 - t0, ok))
    conn.close()


def _client_process(args: tuple[int, str, float, float, int, float]) -> list[tuple[float, bool]]:
    port, token, start, stop, index, interval = args
    results: list[tuple[float, bool]] = []
    threads = [
        threading.Thread(
            target=_client_thread, args=(port, token, start, stop, f"{index}-{t}", results, interval)
        )
        for t in range(THREADS_PER_PROCESS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _load(port: int, token: str, rate: float = 0) -> tuple[float, float, float, int]:
    """(requests/s, p50 ms, p99 ms, errors) over the measured window; ``rate`` 0: as fast as the
    32 clients go, else that many requests/s in all."""
    interval = CLIENT_PROCESSES * THREADS_PER_PROCESS / rate if rate else 0.0
    start = time.time() + 0.5 + WARMUP_S
    stop = start + MEASURE_S
    with multiprocessing.get_context("fork").Pool(CLIENT_PROCESSES) as pool:
        parts = pool.map(
            _client_process, [(port, token, start, stop, i, interval) for i in range(CLIENT_PROCESSES)]
        )
    results = [r for part in parts for r in part]
    ok = [lat * 1000 for lat, good in results if good]
    return len(ok) / MEASURE_S, median(ok), percentile(ok, 99), sum(1 for _, good in results if not good)


def _serve(name: str, argv: list[str], env: dict[str, str], port: int) -> Proc:
    proc = Proc(name, argv, env)
    wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/api/v1/jobs"), 60, f"{name} to listen")
    return proc


def run() -> None:
    flush_redis()
    with throwaway_database("intake") as db:
        env = service_env(db)
        tenant_id, token = create_tenant(env)

        port = free_port()
        argv = processes.web(port=port, workers=WEB_WORKERS, threads=WEB_THREADS)
        note(
            f"intake: the API, {WEB_WORKERS} gunicorn workers x {WEB_THREADS} threads, 32 clients, {MEASURE_S:.0f}s"
        )
        with running(_serve("web", argv, env, port)):
            api = _load(port, token)
            note(f"intake: the API again, paced at {PACED_RATE:.0f} requests/s (NFR-2 at a steady load)")
            paced = _load(port, token, rate=PACED_RATE)

        port = free_port()
        argv = processes.web(port=port, workers=WEB_WORKERS, threads=WEB_THREADS)
        argv[argv.index("scrapejobs.wsgi:application")] = "bench.bare_app:application"
        bare_env = dict(env, DJANGO_SETTINGS_MODULE="bench.bare_settings", BENCH_TENANT_ID=tenant_id)
        note("intake: the bare Django view (one INSERT), same gunicorn command line")
        with running(_serve("bare", argv, bare_env, port)):
            bare = _load(port, token)
    flush_redis()

    for label, (rps, p50, p99, errors) in (("api", api), ("bare", bare)):
        figure(f"intake_{label}_requests_per_s", rps)
        figure(f"intake_{label}_p50_ms", p50)
        figure(f"intake_{label}_p99_ms", p99)
        figure(f"intake_{label}_errors", errors)
    figure("intake_api_to_bare_throughput_ratio", api[0] / bare[0] if bare[0] else float("nan"))
    figure("intake_api_paced_requests_per_s", paced[0])
    figure("intake_api_paced_p50_ms", paced[1])
    figure("intake_api_paced_p99_ms", paced[2])
    figure("intake_api_paced_errors", paced[3])


if __name__ == "__main__":
    run()
