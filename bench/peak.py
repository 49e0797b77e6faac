"""The seed's own peak on one machine (NFR-2, NFR-8, NFR-17): ``BENCH_PEAK_RATE`` jobs per second
(28, the seed's sixfold peak) submitted through the real API for ``BENCH_PEAK_SECONDS`` (180)
against a local target that answers after ``BENCH_PEAK_TARGET_S`` (20 s, a slow real site), so
Little's law puts rate x latency fetches in flight (560).

The service runs as deployed, each process from scrapejobs/processes.py: the web (gunicorn, two
uvicorn workers), the writer, beat, and as many worker processes of ``BENCH_PEAK_THREADS`` (100)
threads as the fetches in flight need with 5 % to spare (six at the seed's peak). The target is
bench/slow_target.py (an event loop on 127.0.0.1, so it holds thousands of slow requests
cheaply). Jobs are submitted by a separate process on a fixed schedule (an open loop: each
request's latency counts from when it was due, bench/common.py ``Schedule``), each job its own URL.

Printed, beside the promises they are held to: intake p99 (NFR-2: 200 ms), the share of jobs
whose first attempt started within 60 s of acceptance (NFR-8: 95 %), jobs succeeded of those
submitted (all), the workers' memory (sum of their RSS at its highest, and per fetch in flight),
the most fetches the target saw in flight, PostgreSQL connections, and CPU per job by kind of
process. ``peak_holds`` says whether the three promises held. The run stops by itself: the
submissions end after the set seconds, and the wait for the last jobs is bounded.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import (
    Proc,
    Schedule,
    celery_ready,
    create_tenant,
    figure,
    flush_redis,
    free_port,
    http_ok,
    median,
    note,
    percentile,
    post_job,
    rss_mib,
    running,
    service_env,
    share_within,
    sql,
    start_slow_target,
    target_stats,
    throwaway_database,
    wait_until,
)
from bench.cpu import CpuMeter, service_classifier
from scrapejobs import processes

RATE = float(os.environ.get("BENCH_PEAK_RATE", "28"))
SECONDS = float(os.environ.get("BENCH_PEAK_SECONDS", "180"))
TARGET_S = float(os.environ.get("BENCH_PEAK_TARGET_S", "20"))
THREADS = int(os.environ.get("BENCH_PEAK_THREADS", "100"))
HEADROOM = 1.05  # worker slots per fetch in flight that Little's law predicts
BODY_BYTES = 4096
INTAKE_P99_AIM_MS = 200.0  # NFR-2
STARTED_WITHIN_S = 60.0  # NFR-8
STARTED_SHARE_AIM = 0.95  # NFR-8
DATABASE = "bench_peak"
LATE_S = 0.005  # a send this much after its slot: the submitting process itself was held up
# Slots still unsent this long after the last one was due are given up (and count as failed
# submissions), so that a run whose intake cannot keep up still ends and reports it.
GIVE_UP_S = 60.0


def workers_needed(*, rate: float, target_s: float, threads: int, headroom: float = HEADROOM) -> int:
    """Worker processes of ``threads`` slots for ``rate`` jobs/s that each hold a slot ``target_s``
    (Little's law), with ``headroom`` to spare: 28/s x 20 s x 1.05 on 100 threads is 6."""
    return max(1, math.ceil(rate * target_s * headroom / threads - 1e-9))


def worker_db_pool(workers: int) -> int:
    """Each worker's PostgreSQL pool (``SCRAPEJOBS_DB_POOL_MAX_SIZE``): the workers share 60
    connections (at most 20 each), so that with the web, the writer and beat all stay within a
    server's default 100. A fetch holds none (NFR-11): the pool serves claims and lease renewals.
    With the default 20 each, six workers of 100 threads used 73 connections in one run at the
    seed's peak and ran the server out of them ("too many clients") in the next, at a higher load."""
    return max(2, min(20, 60 // workers))


class _Sampler:
    """Once a second, while the jobs run: the workers' RSS sum, the target's fetches in flight,
    and the benchmark database's PostgreSQL connections (this sampler's own left out)."""

    def __init__(self, db: str, target: str, workers: list[Proc]):
        self.db, self.target, self.workers = db, target, workers
        self.rss: list[float] = []
        self.in_flight: list[int] = []
        self.connections: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-sampler", daemon=True)

    def _run(self) -> None:
        from bench.common import _pg_connect  # noqa: PLC0415

        with _pg_connect(self.db) as conn:
            while not self._stop.wait(1.0):
                self.rss.append(sum(rss_mib(w.p.pid) for w in self.workers))
                self.in_flight.append(int(target_stats(self.target).get("in_flight", 0)))
                query = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                self.connections.append(int(conn.execute(query).fetchone()[0]) - 1)  # type: ignore[index]

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _wait_for_final(db: str, accepted: int, *, quiet_s: float) -> int:
    """Wait until ``accepted`` jobs are final, or none became final for ``quiet_s``: the number
    that are."""
    query = "SELECT count(*) FROM jobs_job WHERE status IN ('succeeded', 'failed', 'cancelled')"
    last, last_change = -1, time.monotonic()
    while True:
        final = int(sql(db, query)[0][0])
        if final >= accepted:
            return final
        if final != last:
            last, last_change = final, time.monotonic()
        elif time.monotonic() - last_change > quiet_s:
            return final
        time.sleep(1.0)


def run() -> None:
    workers = workers_needed(rate=RATE, target_s=TARGET_S, threads=THREADS)
    in_flight = RATE * TARGET_S
    note(
        f"peak: {RATE:g} jobs/s through the API for {SECONDS:g} s, target answering after {TARGET_S:g} s "
        f"(Little's law: {in_flight:,.0f} in flight), {workers} worker processes of {THREADS} threads"
    )
    figure("peak_loadavg_1m_before", os.getloadavg()[0])
    figure("peak_rate_per_s", RATE)
    figure("peak_seconds", SECONDS)
    figure("peak_target_s", TARGET_S)
    figure("peak_littles_law_in_flight", in_flight)
    figure("peak_workers", workers)
    figure("peak_threads_per_worker", THREADS)
    figure("peak_worker_db_pool", worker_db_pool(workers))
    flush_redis()
    results = Path(tempfile.mkdtemp(prefix="bench-peak-results-"))
    target_proc, target = start_slow_target()
    try:
        with running(target_proc), throwaway_database("peak") as db:
            env = service_env(
                db, SCRAPEJOBS_WORKER_CONCURRENCY=str(THREADS), SCRAPEJOBS_RESULTS_DIR=str(results)
            )
            worker_env = dict(env, SCRAPEJOBS_DB_POOL_MAX_SIZE=str(worker_db_pool(workers)))
            _tenant_id, token = create_tenant(env)
            port = free_port()
            worker_procs = [
                Proc(f"worker{i}", processes.worker(concurrency=THREADS, name=f"worker{i}"), worker_env)
                for i in range(workers)
            ]
            procs = (
                Proc("control", processes.control(), env),
                Proc("beat", processes.beat(schedule_file=str(results / "celerybeat-schedule")), env),
                Proc("web", processes.web(port=port), env),
                *worker_procs,
            )
            with running(*procs):
                wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 120, "the web")
                wait_until(
                    lambda: all(celery_ready(p) for p in (procs[0], *worker_procs)), 180, "the workers"
                )
                idle_rss = sum(rss_mib(w.p.pid) for w in worker_procs)
                with (
                    CpuMeter(service_classifier(DATABASE, submit="bench.peak submit")) as meter,
                    _Sampler(db, target, worker_procs) as sampler,
                ):
                    submit = Proc(
                        "submit",
                        [
                            sys.executable,
                            "-m",
                            "bench.peak",
                            "submit",
                            str(port),
                            token,
                            str(RATE),
                            str(SECONDS),
                            target,
                        ],
                        env,
                    )
                    wait_until(
                        lambda: submit.p.poll() is not None, SECONDS + GIVE_UP_S + 120, "the submissions", 0.5
                    )
                    if submit.p.returncode != 0:
                        raise RuntimeError(submit.output()[-3000:])
                    sent = json.loads(submit.output().splitlines()[-1])
                    submit.stop()
                    accepted = int(sent["accepted"])
                    final = _wait_for_final(db, accepted, quiet_s=TARGET_S + 60)
                rows = sql(
                    db,
                    "SELECT status, EXTRACT(EPOCH FROM started_at - created_at) FROM jobs_job",
                )
    finally:
        shutil.rmtree(results, ignore_errors=True)

    submitted = int(sent["slots"])
    latencies = [float(x) for x in sent["latencies_ms"]]
    delays = [None if d is None else float(d) for _, d in rows]
    succeeded = sum(1 for status, _ in rows if status == "succeeded")
    started_share = share_within(delays, STARTED_WITHIN_S, of=submitted)
    p99 = percentile(latencies, 99)
    figure("peak_submitted", submitted)
    figure("peak_accepted", accepted)
    figure("peak_intake_errors", int(sent["errors"]))
    figure("peak_intake_unsent", int(sent["unsent"]))
    figure("peak_intake_p50_ms", median(latencies))
    figure("peak_intake_p99_ms", p99)
    figure("peak_intake_max_ms", max(latencies, default=float("nan")))
    # From the moment each request was sent rather than due: what intake took, without the time
    # the submitting process lost when the shared machine did not run it on time.
    figure("peak_intake_p99_from_send_ms", percentile([float(x) for x in sent["served_ms"]], 99))
    figure("peak_intake_late_sends", int(sent["late_sends"]))
    figure("peak_intake_max_send_lag_ms", float(sent["max_send_lag_ms"]))
    figure("peak_jobs_in_ledger", len(rows))
    figure("peak_jobs_final", final)
    figure("peak_started_within_60s_share", started_share)
    known = [d for d in delays if d is not None]
    figure("peak_start_delay_p50_s", median(known))
    figure("peak_start_delay_p95_s", percentile(known, 95))
    figure("peak_start_delay_max_s", max(known, default=float("nan")))
    figure("peak_succeeded", succeeded)
    figure("peak_succeeded_of_submitted", succeeded / submitted if submitted else float("nan"))
    figure("peak_target_max_in_flight", max(sampler.in_flight, default=0))
    peak_rss = max(sampler.rss, default=float("nan"))
    figure("peak_worker_rss_idle_mib", idle_rss)
    figure("peak_worker_rss_mib", peak_rss)
    figure("peak_worker_rss_mib_per_fetch_in_flight", peak_rss / max(max(sampler.in_flight, default=1), 1))
    figure("peak_postgres_connections_max", max(sampler.connections, default=0))
    cpu = meter.totals()
    jobs = max(succeeded, 1)
    for kind, seconds in sorted(cpu.items()):
        figure(f"peak_cpu_ms_per_job_{kind}", seconds * 1000 / jobs)
    figure("peak_cpu_ms_per_job_total", sum(cpu.values()) * 1000 / jobs)
    figure("peak_loadavg_1m_after", os.getloadavg()[0])
    holds = p99 <= INTAKE_P99_AIM_MS and started_share >= STARTED_SHARE_AIM and succeeded == submitted
    figure("peak_holds", "yes" if holds else "no")


def _submit_thread(port: int, token: str, schedule: Schedule, target: str, out: list) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    while (due := schedule.take()) is not None:
        if time.time() > schedule.stop + GIVE_UP_S:
            break  # intake fell that far behind: the rest are counted as not sent
        time.sleep(max(0.0, due - time.time()))
        lag = time.time() - due
        i = round((due - schedule.first) / schedule.interval)
        url = f"{target}/bytes/{BODY_BYTES}?n={i}&delay={TARGET_S:g}"
        sent = time.time()
        ok, conn = post_job(conn, port, headers, url)
        out.append((time.time() - due, ok, lag, time.time() - sent))
    conn.close()


def _submit(port: int, token: str, rate: float, seconds: float, target: str) -> None:
    """``python -m bench.peak submit PORT TOKEN RATE SECONDS TARGET``: the open loop; prints one
    JSON line (slots, accepted, errors, every latency in ms, the largest send lag)."""
    first = time.time() + 0.5
    schedule = Schedule(first, 1 / rate, first + seconds)
    # Enough connections for half a second of answers at the rate: a slow answer never makes the
    # next request late unless intake is slower than that.
    connections = min(256, max(16, math.ceil(rate / 2)))
    out: list[tuple[float, bool, float, float]] = []
    threads = [
        threading.Thread(target=_submit_thread, args=(port, token, schedule, target, out))
        for _ in range(connections)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    slots = round(seconds * rate)
    ok = [lat * 1000 for lat, good, _, _ in out if good]
    served = [took * 1000 for _, good, _, took in out if good]
    print(
        json.dumps(
            {
                "slots": max(slots, len(out)),
                "accepted": len(ok),
                "errors": len(out) - len(ok),
                "unsent": max(0, slots - len(out)),
                "latencies_ms": [round(x, 3) for x in ok],
                "served_ms": [round(x, 3) for x in served],
                "late_sends": sum(1 for _, _, lag, _ in out if lag > LATE_S),
                "max_send_lag_ms": max((lag * 1000 for _, _, lag, _ in out), default=0.0),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["submit"]:
        _submit(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
    else:
        run()
