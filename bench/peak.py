"""The seed's own peak on one machine, and multiples of it (NFR-2, NFR-8, NFR-17): ``BENCH_PEAK_RATE``
jobs per second (28, the seed's sixfold peak) times each multiple of the ladder 1, 2, 5, 10 up to
``BENCH_PEAK_MULTIPLE`` (1; ``make bench BENCH=peak MULTIPLE=10``), submitted through the real API
for ``BENCH_PEAK_SECONDS`` (180) against a local target that answers after ``BENCH_PEAK_TARGET_S``
(20 s, a slow real site), so Little's law puts rate x latency fetches in flight (560 at x1, 5,600
at x10). The climb stops at the first multiple that does not hold.

Each rung runs the service as deployed, each process from scrapejobs/processes.py, on a fresh
database: the web (gunicorn, two uvicorn workers), control, beat, and the worker layout of
bench/peak_plan.py ``layout`` for its rate (one worker process per core at least, at most
``BENCH_PEAK_THREADS`` (1,000) threads each, the fetches in flight with 5 % to spare), at nice
``BENCH_PEAK_WORKER_NICE`` (10, as under ``make run``: the intake comes first). Before it
starts, the machine's limits are read (threads, ``ulimit -n``, PostgreSQL's ``max_connections``,
Redis's ``maxclients``, memory); a rung that would pass one says which and is not run. The target
is bench/slow_target.py (one event loop); jobs are submitted by a separate process on a fixed
schedule (an open loop, bench/common.py ``Schedule``), each job its own URL.

Printed per rung (``peak_x<multiple>_...``), beside the promises they are held to: intake p99
(NFR-2: 200 ms), the share of jobs whose first attempt started within 60 s of acceptance (NFR-8:
95 %), jobs succeeded of those submitted (all), the workers' memory (sum of their RSS at its
highest, and per fetch in flight), the most fetches the target saw in flight, PostgreSQL and Redis
connections, CPU per job by kind of process (PostgreSQL and Redis included), the machine's CPU use,
``holds``, and for a rung that did not hold ``bottleneck`` and ``limited_by``, named from those
measurements (bench/peak_plan.py ``bottleneck``). Then ``peak_largest_multiple_holding`` and the
next multiple's bottleneck. Every rung stops by itself (the wait for its last jobs is bounded).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    throwaway_database,
    wait_until,
)
from bench.cpu import CpuMeter, service_classifier
from bench.peak_measure import Sampler, host_limits, wait_for_final
from bench.peak_plan import (
    BEAT_DB_POOL,
    CONTROL_DB_POOL,
    LADDER,
    WEB_DB_POOL,
    Layout,
    Measured,
    bottleneck,
    cpu_busy_ticks,
    ladder,
    layout,
    limits,
    log_limits,
    mem_total_mib,
    raise_fd_limit,
    worker_connections,
)
from scrapejobs import processes

RATE = float(os.environ.get("BENCH_PEAK_RATE", "28"))
SECONDS = float(os.environ.get("BENCH_PEAK_SECONDS", "180"))
TARGET_S = float(os.environ.get("BENCH_PEAK_TARGET_S", "20"))
THREADS = int(os.environ.get("BENCH_PEAK_THREADS", "1000"))
MULTIPLE = int(os.environ.get("BENCH_PEAK_MULTIPLE", "1"))
WORKER_NICE = int(os.environ.get("BENCH_PEAK_WORKER_NICE", "10"))
if not 0 <= WORKER_NICE <= 19:
    raise SystemExit(f"BENCH_PEAK_WORKER_NICE={WORKER_NICE} is outside 0..19")
BODY_BYTES = 4096
INTAKE_P99_AIM_MS = 200.0  # NFR-2
STARTED_WITHIN_S = 60.0  # NFR-8
STARTED_SHARE_AIM = 0.95  # NFR-8
DATABASE = "bench_peak"
LATE_S = 0.005  # a send this much after its slot: the submitting process itself was held up
# Slots still unsent this long after the last one was due are given up (and count as failed
# submissions), so that a run whose intake cannot keep up still ends and reports it.
GIVE_UP_S = 60.0


def run() -> None:
    fd_limit = raise_fd_limit()
    rungs = ladder(MULTIPLE)
    note(
        f"peak: {RATE:g} jobs/s x {', '.join(map(str, rungs))} through the API for {SECONDS:g} s each, "
        f"target answering after {TARGET_S:g} s; stops at the first multiple that does not hold"
    )
    figure("peak_multiple_asked", MULTIPLE)
    figure("peak_base_rate_per_s", RATE)
    figure("peak_seconds", SECONDS)
    figure("peak_target_s", TARGET_S)
    figure("peak_cores", os.cpu_count() or 1)
    figure("peak_fd_limit", fd_limit)
    largest, failed = 0, None
    for multiple in rungs:
        limited = _rung(multiple, fd_limit)
        if limited is not None:
            failed = (multiple, *limited)
            break
        largest = multiple
    figure("peak_largest_multiple_holding", largest)
    if failed is None:
        after = next((m for m in LADDER if m > largest), largest * 2)
        figure("peak_next_multiple", after)
        figure("peak_next_multiple_bottleneck", "not tried")
        figure("peak_next_multiple_limited_by", f"not tried: MULTIPLE={MULTIPLE}")
    else:
        figure("peak_next_multiple", failed[0])
        figure("peak_next_multiple_bottleneck", failed[1])
        figure("peak_next_multiple_limited_by", failed[2])


def _rung(multiple: int, fd_limit: int) -> tuple[str, str] | None:
    """One multiple, start to end: None when it held, else (bottleneck, what limited it)."""
    p = f"peak_x{multiple}_"
    rate = RATE * multiple
    in_flight = rate * TARGET_S
    host = host_limits(fd_limit)
    share = worker_connections(host.pg_connections_free)
    plan = layout(
        rate=rate, target_s=TARGET_S, max_threads=THREADS, cores=os.cpu_count() or 1, worker_connections=share
    )
    note(
        f"peak x{multiple}: {rate:g} jobs/s (Little's law: {in_flight:,.0f} in flight), "
        f"{plan.workers} worker processes of {plan.threads} threads, {plan.db_pool} connections each"
    )
    figure(p + "loadavg_1m_before", os.getloadavg()[0])
    figure(p + "rate_per_s", rate)
    figure(p + "littles_law_in_flight", in_flight)
    figure(p + "workers", plan.workers)
    figure(p + "threads_per_worker", plan.threads)
    figure(p + "worker_db_pool", plan.db_pool)
    figure(p + "threads_free_before", host.threads_free)
    figure(p + "postgres_connections_free_before", host.pg_connections_free)
    problems = limits(plan, host, in_flight=in_flight)
    if problems:
        return _failed(p, problems[0].split(":", 1)[0], "not run: " + "; ".join(problems))
    try:
        measured = _measure(rate, plan)
    except RuntimeError as e:  # a process exited or did not start: its last line, a limit it names
        lines = str(e).strip().splitlines() or ["?"]
        named = log_limits({"the service": str(e)})
        why = lines[0][:200] + (f" ... {lines[-1][:200]}" if len(lines) > 1 else "")
        return _failed(p, named[0].split(" (", 1)[0] if named else "did not finish", why)
    return _report(p, plan, measured)


def _failed(p: str, kind: str, why: str) -> tuple[str, str]:
    figure(p + "holds", "no")
    figure(p + "bottleneck", kind)
    figure(p + "limited_by", why)
    return kind, why


@dataclass
class _Run:
    sent: dict[str, Any]
    rows: list[tuple]
    final: int
    idle_rss: float
    sampler: Sampler
    cpu: dict[str, float]
    wall_s: float
    busy_share: float
    log_limits: tuple[str, ...]
    exited: tuple[str, ...] = field(default=())


def _service(db: str, plan: Layout, results: Path) -> tuple[str, tuple[Proc, ...], list[Proc], int]:
    """The token, every service process and the workers, and the web's port."""
    env = service_env(
        db, SCRAPEJOBS_WORKER_CONCURRENCY=str(plan.threads), SCRAPEJOBS_RESULTS_DIR=str(results)
    )
    _tenant_id, token = create_tenant(env)
    port = free_port()
    # One machine for every component: the workers run at WORKER_NICE (10 unless set, as under make
    # run), so that the intake's requests (p99 aim 200 ms, NFR-2) come first when the cores are busy
    # (docs/settings.md).
    worker_env = dict(
        env, SCRAPEJOBS_DB_POOL_MAX_SIZE=str(plan.db_pool), SCRAPEJOBS_WORKER_NICE=str(WORKER_NICE)
    )
    workers = [
        Proc(f"worker{i}", processes.worker(concurrency=plan.threads, name=f"worker{i}"), worker_env)
        for i in range(plan.workers)
    ]
    pool = "SCRAPEJOBS_DB_POOL_MAX_SIZE"
    procs = (
        Proc("control", processes.control(), dict(env, **{pool: str(CONTROL_DB_POOL)})),
        Proc(
            "beat",
            processes.beat(schedule_file=str(results / "celerybeat-schedule")),
            dict(env, **{pool: str(BEAT_DB_POOL)}),
        ),
        Proc("web", processes.web(port=port), dict(env, **{pool: str(WEB_DB_POOL)})),
        *workers,
    )
    return token, procs, workers, port


def _measure(rate: float, plan: Layout) -> _Run:
    flush_redis()
    results = Path(tempfile.mkdtemp(prefix="bench-peak-results-"))
    target_proc, target = start_slow_target()
    try:
        with running(target_proc), throwaway_database("peak") as db:
            token, procs, workers, port = _service(db, plan, results)
            with running(*procs):
                wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 120, "the web")
                wait_until(lambda: all(celery_ready(p) for p in (procs[0], *workers)), 180, "the workers")
                idle_rss = sum(rss_mib(w.p.pid) for w in workers)
                started, ticks = time.monotonic(), cpu_busy_ticks()
                with (
                    CpuMeter(service_classifier(DATABASE, submit="bench.peak submit")) as meter,
                    Sampler(db, target, workers, plan.slots) as sampler,
                ):
                    sent = _submit_and_wait(port, token, rate, target, db)
                    final = wait_for_final(db, int(sent["accepted"]), quiet_s=TARGET_S + 60)
                wall, after = time.monotonic() - started, cpu_busy_ticks()
                exited = tuple(p.name for p in procs if p.p.poll() is not None)
                found = log_limits({p.name: p.output() for p in (target_proc, *procs)})
                rows = sql(db, "SELECT status, EXTRACT(EPOCH FROM started_at - created_at) FROM jobs_job")
    finally:
        shutil.rmtree(results, ignore_errors=True)
    busy = (after[0] - ticks[0]) / max(after[1] - ticks[1], 1)
    return _Run(sent, rows, final, idle_rss, sampler, meter.totals(), wall, busy, found, exited)


def _submit_and_wait(port: int, token: str, rate: float, target: str, db: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.peak", "submit", str(port), token, str(rate), str(SECONDS), target]
    submit = Proc("submit", argv, service_env(db))
    try:
        wait_until(lambda: submit.p.poll() is not None, SECONDS + GIVE_UP_S + 120, "the submissions", 0.5)
        if submit.p.returncode != 0:
            raise RuntimeError(submit.output()[-3000:])
        return dict(json.loads(submit.output().splitlines()[-1]))
    finally:
        submit.stop()


def _report(p: str, plan: Layout, r: _Run) -> tuple[str, str] | None:
    """The rung's figures; None when the three promises held, else (bottleneck, measured)."""
    sent, sampler = r.sent, r.sampler
    submitted = int(sent["slots"])
    latencies = [float(x) for x in sent["latencies_ms"]]
    delays = [None if d is None else float(d) for _, d in r.rows]
    succeeded = sum(1 for status, _ in r.rows if status == "succeeded")
    started_share = share_within(delays, STARTED_WITHIN_S, of=submitted)
    p99 = percentile(latencies, 99)
    failed_intake = int(sent["errors"]) + int(sent["unsent"])
    for name, value in (
        ("submitted", submitted),
        ("accepted", int(sent["accepted"])),
        ("intake_errors", int(sent["errors"])),
        ("intake_unsent", int(sent["unsent"])),
        ("intake_p50_ms", median(latencies)),
        ("intake_p99_ms", p99),
        ("intake_max_ms", max(latencies, default=float("nan"))),
        # From the moment each request was sent rather than due: what intake took, without the
        # time the submitting process lost when the shared machine did not run it on time.
        ("intake_p99_from_send_ms", percentile([float(x) for x in sent["served_ms"]], 99)),
        ("intake_late_sends", int(sent["late_sends"])),
        ("intake_max_send_lag_ms", float(sent["max_send_lag_ms"])),
        ("jobs_in_ledger", len(r.rows)),
        ("jobs_final", r.final),
        ("started_within_60s_share", started_share),
        ("start_delay_p50_s", median([d for d in delays if d is not None])),
        ("start_delay_p95_s", percentile([d for d in delays if d is not None], 95)),
        ("start_delay_max_s", max((d for d in delays if d is not None), default=float("nan"))),
        ("succeeded", succeeded),
        ("succeeded_of_submitted", succeeded / submitted if submitted else float("nan")),
    ):
        figure(p + name, value)
    measured = Measured(
        cores=os.cpu_count() or 1,
        wall_s=r.wall_s,
        cpu_s=r.cpu,
        machine_busy_share=r.busy_share,
        mem_available_min_mib=min(sampler.mem_available, default=float("nan")),
        mem_total_mib=mem_total_mib(),
        intake_p99_ms=p99,
        intake_aim_ms=INTAKE_P99_AIM_MS,
        intake_failed=failed_intake,
        started_share=started_share,
        started_aim=STARTED_SHARE_AIM,
        succeeded=succeeded,
        submitted=submitted,
        waiting_while_free_s=sampler.waiting_while_free,
        slots=plan.slots,
        in_flight_max=max(sampler.in_flight, default=0),
        log_limits=r.log_limits,
        exited=r.exited,
    )
    _resources(p, r, measured, jobs=max(succeeded, 1))
    holds = (
        p99 <= INTAKE_P99_AIM_MS
        and started_share >= STARTED_SHARE_AIM
        and succeeded == submitted
        and not r.exited
    )
    if holds:
        figure(p + "holds", "yes")
        return None
    return _failed(p, *bottleneck(measured))


def _resources(p: str, r: _Run, m: Measured, *, jobs: int) -> None:
    """Memory, connections and CPU: what the rung used of the machine."""
    sampler = r.sampler
    peak_rss = max(sampler.rss, default=float("nan"))
    figure(p + "target_max_in_flight", m.in_flight_max)
    figure(p + "worker_slots", m.slots)
    figure(p + "waiting_while_slots_free_s", m.waiting_while_free_s)
    figure(p + "worker_rss_idle_mib", r.idle_rss)
    figure(p + "worker_rss_mib", peak_rss)
    figure(p + "worker_rss_mib_per_fetch_in_flight", peak_rss / max(m.in_flight_max, 1))
    figure(p + "worker_rss_added_mib_per_fetch_in_flight", (peak_rss - r.idle_rss) / max(m.in_flight_max, 1))
    figure(p + "mem_available_min_mib", m.mem_available_min_mib)
    figure(p + "postgres_connections_max", max(sampler.connections, default=0))
    figure(p + "redis_clients_max", max(sampler.redis_clients, default=0))
    for kind, seconds in sorted(r.cpu.items()):
        figure(f"{p}cpu_ms_per_job_{kind}", seconds * 1000 / jobs)
    figure(p + "cpu_ms_per_job_total", sum(r.cpu.values()) * 1000 / jobs)
    figure(p + "cpu_share_of_cores_benchmark", sum(r.cpu.values()) / (m.cores * max(r.wall_s, 1e-9)))
    figure(p + "cpu_share_of_cores_machine", r.busy_share)
    figure(p + "loadavg_1m_after", os.getloadavg()[0])


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
