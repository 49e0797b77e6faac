"""End-to-end benchmark (NFR-8, NFR-11): 2,000 jobs against a local target through the whole
service, beside two bare Celery tasks measured in the same run, at each target latency of
``BENCH_E2E_LATENCIES_MS`` (default ``0,500``: a local target answering at once, and one answering
in half a second as real sites do). For a latency L > 0 it also prints the share of Little's law
reached: a pool of C threads can finish at most C / L jobs per second.

- scrapejobs: writer, beat and ``BENCH_E2E_WORKERS`` (4) worker processes sharing the pool's
  threads (scrapejobs/processes.py command lines) on a throwaway database holding a week of another
  tenant's final jobs (``HISTORY``), analysed before the run. Jobs are submitted with
  ``job_create`` in a loop from one process (the same single INSERT the API makes, without HTTP:
  the intake benchmark measures HTTP), then published by the outbox
  publisher, claimed, fetched, stored, and recorded through the writer. Measured from the first
  submit to the moment the last job is final in the database, seen through one held connection
  whose backend's CPU counts on no side.
- naive: ``bench/naive_app.py``, the bare task as it is often written (INFO logs, a broker client
  per ``delay()``, ``requests.get`` without a session, ack emulation on, prefetch 4).
- tuned: ``bench/tuned_app.py``, the bare task as a competent engineer writes it (WARNING logs, a
  session per thread with keep-alive, ack emulation off, prefetch 1, no heartbeats, remote control
  or rate limits, every message through one producer), in the same worker processes as
  scrapejobs. The ratios that matter are to this one.
- scrapejobs_one_process: scrapejobs with the whole pool in one worker process, as the naive task
  runs: what the layout is worth (``…_scrapejobs_to_one_process_ratio``). A process's threads
  share one interpreter lock: at a fast target its handoffs between 100 threads cost CPU and
  latency that 4 processes of 25 threads do not pay (docs/benchmarks.md).

The four run in ``BENCH_E2E_ROUNDS`` (3) alternating rounds, the order rotated each round
(A B C D, B C D A, C D A B), against the same target with the same threads in all; each figure is
the median of the rounds, with its spread (largest minus smallest) beside it.
``…_idle_slot_share``: the share of the worker's thread time spent idle while jobs waited to start
(0: the pool was full whenever work waited), from the ledger after the run: a thread is busy from
its attempt's claim to the attempt's end as the worker stamped it, not until the writer folds the
receipt (the job's status is still ``running`` then, and a count of those called a thread that
had moved on busy). The idle time with no job waiting is split at the last submission
(``…_unfed_share`` before, ``…_drain_share`` after), beside ``…_submit_s``, ``…_pool_full_s`` and
``…_fold_lag_s`` (``_pool_use``).
``…_attempt_overhead_ms``: the median attempt's length (its claim to the worker's end stamp, after
the body is stored and before the receipt is sent) past the target's latency: the lease's hold,
the request, storing the body and the waits for the interpreter between them; the gate, the claim
itself and the receipt fall outside it, in the idle share. CPU is counted per process kind
(bench/cpu.py): PostgreSQL's WAL writer, checkpointer and background writer count for scrapejobs,
and its backends' CPU is also split by the process they served (``…_postgres_for_worker``,
``_control``, ``_intake``, ``_beat``: each process's sessions carry its name).
``…_waits_per_job_<kind>`` and ``…_preemptions_per_job_<kind>``: each side's worker threads'
voluntary and involuntary context switches per job (bench/cpu.py).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import (
    Proc,
    _pg_connect,
    celery_ready,
    create_tenant,
    figure,
    flush_redis,
    median,
    note,
    redis_url_db,
    running,
    service_env,
    start_target,
    throwaway_database,
    wait_until,
)
from bench.cpu import Classify, CpuMeter
from scrapejobs import processes

JOBS = int(os.environ.get("BENCH_E2E_JOBS", "2000"))
CONCURRENCY = int(os.environ.get("BENCH_E2E_CONCURRENCY", "100"))  # the worker's default
# Worker processes the pool's threads are split among, for scrapejobs and the tuned task alike.
WORKERS = int(os.environ.get("BENCH_E2E_WORKERS", "4"))
if WORKERS < 1 or CONCURRENCY % WORKERS:
    raise SystemExit(f"BENCH_E2E_WORKERS={WORKERS} must divide BENCH_E2E_CONCURRENCY={CONCURRENCY}")
BODY_BYTES = 4096
TIMEOUT_S = 600
# The ledger a live service has (NFR-11): this many final jobs of another tenant, with their
# attempts, over the week before, are in the database before each service round and analysed
# with it (``_history``).
# On an empty ledger the plans PostgreSQL keeps per connection from a run's first seconds (the
# claim's, the foreign-key check of the attempt's row) are made for a table of a few pages:
# sequential scans, kept until the next ANALYZE, which autovacuum makes within minutes on a live
# server and never within a run of seconds; every claim then read the whole table, more of it with
# every job the run added (docs/benchmarks.md). 0: the empty ledger of a fresh install.
HISTORY = int(os.environ.get("BENCH_E2E_HISTORY", "20000"))
LATENCIES_MS = [int(x) for x in os.environ.get("BENCH_E2E_LATENCIES_MS", "0,500").split(",") if x.strip()]


def _url(target: str, i: int, latency_ms: int) -> str:
    delay = f"&delay={latency_ms / 1000}" if latency_ms else ""
    return f"{target}/bytes/{BODY_BYTES}?n={i}{delay}"


def _classifier(*, skip_pids: frozenset[int] = frozenset()) -> Classify:
    """The kinds of process whose CPU a job costs (bench/cpu.py). ``skip_pids``: the PostgreSQL
    backend of the benchmark's own poll for the end of the run, counted on no side."""

    def classify(pid: int, cmdline: str, environ: dict[str, str]) -> str | None:
        if cmdline.startswith("postgres: "):
            if pid in skip_pids:
                return None
            if any(f"postgres: {bg}" in cmdline for bg in _PG_BACKGROUND):
                return "postgres_bg"  # the server's WAL writer, checkpointer, background writer
            return "postgres" if " bench_e2e " in cmdline else None  # the backends of our database
        if "redis-server" in cmdline:
            return "redis"  # shared with anything else using that server
        if "bench.common target" in cmdline:
            return "target"
        if "bench.naive_app" in cmdline:
            return "naive_worker"
        if "bench.tuned_app" in cmdline:
            return "tuned_worker"
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

    return classify


_classify = _classifier()
_PG_BACKGROUND = ("walwriter", "checkpointer", "background writer")


def _baseline(kind: str, target: str, latency_ms: int, *, workers: int) -> tuple[float, CpuMeter]:
    """A bare Celery task's run: ``naive`` (bench/naive_app.py) or ``tuned`` (bench/tuned_app.py),
    same pool (threads) and concurrency, split among ``workers`` processes; from the first message
    published to the last file written. Completion is seen by listing a directory from this
    process (not counted)."""
    broker = redis_url_db(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), 2)
    env = dict(os.environ, NAIVE_BROKER_URL=broker, TUNED_BROKER_URL=broker, PYTHONUNBUFFERED="1")
    out = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
    argv = [str(Path(sys.executable).parent / "celery"), "-A", f"bench.{kind}_app", "worker"]
    argv += ["--queues", kind, "--pool", "threads", "--concurrency", str(CONCURRENCY // workers)]
    argv += ["--without-mingle", "--without-gossip"]
    if kind == "naive":
        argv += ["--loglevel", "INFO"]
    else:
        argv += ["--loglevel", "WARNING", "--without-heartbeat", "--prefetch-multiplier", "1"]
    os.environ["NAIVE_BROKER_URL"] = os.environ["TUNED_BROKER_URL"] = broker
    app_module = importlib.import_module(f"bench.{kind}_app")
    fetch = app_module.fetch

    try:
        procs = [Proc(f"{kind}-worker", [*argv, "--hostname", f"{kind}{i}@%h"], env) for i in range(workers)]
        with running(*procs) as started_procs:
            wait_until(lambda: all(celery_ready(w) for w in started_procs), 60, f"the {kind} workers")
            with CpuMeter(_classify, switches_of=WORKER_KINDS) as meter:
                started = time.time()
                if kind == "naive":
                    for i in range(JOBS):  # a broker client and a message per call, as written
                        fetch.delay(_url(target, i, latency_ms), str(out / f"{i}.body"))
                else:
                    with app_module.app.producer_or_acquire() as producer:  # one producer for all
                        for i in range(JOBS):
                            fetch.apply_async(
                                (_url(target, i, latency_ms), str(out / f"{i}.body")), producer=producer
                            )
                wait_until(
                    lambda: sum(1 for p in out.iterdir() if p.suffix == ".body") >= JOBS,
                    TIMEOUT_S,
                    f"the {kind} jobs",
                    interval=0.05,
                )
                elapsed = time.time() - started
            return JOBS / elapsed, meter
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _scrapejobs(
    target: str, latency_ms: int, *, jobs: int = JOBS, workers: int = 1
) -> tuple[float, dict[str, float], CpuMeter]:
    """Throughput (jobs/s), jobs per final status, and the meter of the run (CPU, memory), with
    the pool's ``CONCURRENCY`` threads split among ``workers`` worker processes."""
    results = Path(tempfile.mkdtemp(prefix="bench-results-"))
    with throwaway_database("e2e") as db:
        env = service_env(
            db, SCRAPEJOBS_WORKER_CONCURRENCY=str(CONCURRENCY), SCRAPEJOBS_RESULTS_DIR=str(results)
        )
        tenant_id, _token = create_tenant(env)
        if HISTORY:
            subprocess.run(
                [sys.executable, "-m", "bench.e2e", "history", str(HISTORY)],
                env=env,
                check=True,
                capture_output=True,
            )
        schedule = str(results / "celerybeat-schedule")
        # Each process's database sessions carry its name (libpq's PGAPPNAME), so that
        # PostgreSQL's CPU is split by whose statements it ran (``_PgClients``).
        procs = (
            Proc("control", processes.control(), {**env, "PGAPPNAME": "control"}),
            Proc("beat", processes.beat(schedule_file=schedule), {**env, "PGAPPNAME": "beat"}),
            *(
                Proc(
                    "worker",
                    processes.worker(concurrency=CONCURRENCY // workers, name=f"worker{i}"),
                    {**env, "PGAPPNAME": "worker"},
                )
                for i in range(workers)
            ),
        )
        # One connection held for the whole run, its backend left out of the count: the poll for
        # the end costs neither side CPU that is counted (a new connection per poll did).
        with _pg_connect(db) as poll:
            poll.execute("ANALYZE")  # the planner's statistics, as a live database has them
            poll_pid = poll.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            finals = _Finals(poll, tenant_id)
            clients = _PgClients(poll)
            try:
                with running(*procs) as (writer, _beat, *workers_up):
                    wait_until(
                        lambda: celery_ready(writer) and all(celery_ready(w) for w in workers_up),
                        60,
                        "writer and workers",
                    )
                    meter = CpuMeter(
                        _classifier(skip_pids=frozenset({poll_pid})), switches_of=WORKER_KINDS
                    ).__enter__()
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
                        {**env, "PGAPPNAME": "intake"},
                    )
                    wait_until(
                        lambda: clients.sample() and submit.p.poll() is not None,
                        TIMEOUT_S,
                        "the submissions",
                    )
                    if submit.p.returncode != 0:
                        raise RuntimeError(submit.output())
                    started, submitted = (float(x) for x in submit.output().split()[:2])
                    submit.stop()
                    wait_until(
                        lambda: clients.sample() and finals.sample() >= jobs,
                        TIMEOUT_S,
                        "every job to be final",
                        0.05,
                    )
                    elapsed = time.time() - started
                    meter.__exit__()
            finally:
                shutil.rmtree(results, ignore_errors=True)
            counts = dict(
                poll.execute(
                    "SELECT status, count(*) FROM jobs_job WHERE tenant_id = %s GROUP BY status", [tenant_id]
                ).fetchall()
            )
            counts.update(
                _pool_use(poll, tenant_id, latency_ms=latency_ms, started=started, ended=started + elapsed)
            )
            counts["submit_s"] = submitted - started
    for client, used in clients.split(meter.by_pid("postgres")).items():
        counts[f"postgres_cpu_s_for_{client}"] = used
    return jobs / elapsed, counts, meter


class _PgClients:
    """Which process each PostgreSQL backend of the run served (its ``application_name``), read
    on the held connection at most once a second: the service's backends are its pools'
    connections, opened as the run starts and kept. ``split`` sums a per-backend CPU count by
    client: ``worker`` (claims, lease renewals), ``control`` (the publisher's dispatch, the
    writer's folds), ``intake`` (one INSERT per job), ``beat``, ``other`` (a backend that came
    and went between two reads)."""

    QUERY = "SELECT pid, application_name FROM pg_stat_activity WHERE datname = current_database()"

    def __init__(self, conn: Any):
        self.conn = conn
        self.names: dict[int, str] = {}
        self.read_at = 0.0

    def sample(self) -> bool:
        if time.monotonic() - self.read_at >= 1.0:
            self.read_at = time.monotonic()
            self.names.update(
                {pid: name or "other" for pid, name in self.conn.execute(self.QUERY).fetchall()}
            )
        return True

    def split(self, cpu_by_pid: dict[int, float]) -> dict[str, float]:
        out = dict.fromkeys(("worker", "control", "intake", "beat", "other"), 0.0)
        for pid, used in cpu_by_pid.items():
            name = self.names.get(pid, "other")
            out[name if name in out else "other"] += used
        return out


class _Finals:
    """The count of the run's final jobs (its tenant's: the ledger's history is another's), read
    on the held connection: the poll for the run's end."""

    QUERY = "SELECT count(*) FROM jobs_job WHERE tenant_id = %s AND status IN ('succeeded', 'failed', 'cancelled')"

    def __init__(self, conn: Any, tenant_id: str):
        self.conn = conn
        self.tenant_id = tenant_id

    def sample(self) -> int:
        return int(self.conn.execute(self.QUERY, [self.tenant_id]).fetchone()[0])


def _pool_use(
    conn: Any, tenant_id: str, *, latency_ms: int, started: float, ended: float
) -> dict[str, float]:
    """From the ledger, after the run (the jobs of ``tenant_id``, the run's): where the pool's
    thread time went (``CONCURRENCY`` threads from ``started`` to ``ended``, wall-clock seconds),
    and the median attempt's length past the target's latency. A thread is busy from its
    attempt's claim (``started_at``, the database's clock) to the attempt's end (``finished_at``,
    the worker's, on this machine); a job waits from its intake to its first claim. A thread out
    of an attempt is idle, and its time is:

    - ``idle_slot_share``: idle while a job waited to start (the dispatcher's fault): the time
      integral of min(idle threads, waiting jobs);
    - ``unfed_share``: idle with no job waiting before the last job was submitted (the intake had
      not handed the work over yet: the run's start);
    - ``drain_share``: idle with no job waiting after that (threads with nothing left to take
      while the last attempts ran and their receipts were folded: the run's end);

    each over the pool's thread time; the attempts take the rest. ``pool_full_s``: from the
    start to the moment every thread was first in an attempt; ``fold_lag_s``: from the last
    attempt's end to the run's end (the last receipt folded and seen by the poll)."""
    attempts = conn.execute(
        "SELECT extract(epoch FROM a.started_at)::float8, extract(epoch FROM a.finished_at)::float8"
        " FROM jobs_attempt AS a JOIN jobs_job AS j ON j.id = a.job_id"
        " WHERE a.finished_at IS NOT NULL AND j.tenant_id = %s",
        [tenant_id],
    ).fetchall()
    jobs = conn.execute(
        "SELECT extract(epoch FROM created_at)::float8, extract(epoch FROM started_at)::float8"
        " FROM jobs_job WHERE tenant_id = %s",
        [tenant_id],
    ).fetchall()
    events: list[tuple[float, int, int]] = []  # (time, change in busy threads, change in waiting jobs)
    for began, finished in attempts:
        events += [(began, 1, 0), (finished, -1, 0)]
    for created, first_claim in jobs:
        events.append((created, 0, 1))
        if first_claim is not None:
            events.append((first_claim, 0, -1))
    events.sort()
    events.append((ended, 0, 0))  # the stretch after the last event counts too
    last_submitted = max((created for created, _ in jobs), default=started)
    idle_slot_s = unfed_s = drain_s = 0.0
    busy, waiting, last = 0, 0, started
    full_at: float | None = None
    for at, d_busy, d_waiting in events:
        at = min(max(at, started), ended)
        idle = max(CONCURRENCY - busy, 0)
        fed = min(idle, waiting)
        idle_slot_s += (at - last) * fed
        # The stretch [last, at) split at the last submission: before it unfed, after it drain.
        split = min(max(last_submitted, last), at)
        unfed_s += (split - last) * (idle - fed)
        drain_s += (at - split) * (idle - fed)
        busy, waiting, last = busy + d_busy, waiting + d_waiting, at
        if full_at is None and busy >= CONCURRENCY:
            full_at = at
    lengths = [(finished - began) * 1000 for began, finished in attempts]
    slot_s = CONCURRENCY * (ended - started)

    def share(seconds: float) -> float:
        return seconds / slot_s if slot_s > 0 else float("nan")

    return {
        "idle_slot_share": share(idle_slot_s),
        "unfed_share": share(unfed_s),
        "drain_share": share(drain_s),
        "pool_full_s": (full_at - started) if full_at is not None else float("nan"),
        "fold_lag_s": ended - max((f for _, f in attempts), default=ended),
        "attempt_overhead_ms": (median(lengths) - latency_ms) if lengths else float("nan"),
    }


# What a scrapejobs round reports of its pool beside its rate and CPU (``_pool_use``), and how
# long its submissions took.
_POOL_FIGURES = (
    "idle_slot_share",
    "unfed_share",
    "drain_share",
    "pool_full_s",
    "fold_lag_s",
    "attempt_overhead_ms",
    "submit_s",
)
SIDES = ("naive", "tuned", "scrapejobs", "scrapejobs_one_process")
ROUNDS = int(os.environ.get("BENCH_E2E_ROUNDS", "3"))
# The processes whose CPU a job costs each side, like for like (bench/cpu.py kinds), the
# submitting one left out on all (NFR-11).
_SERVICE_KINDS = ("worker", "writer", "beat", "postgres", "postgres_bg", "redis", "target")
# The worker processes of each side, whose threads' context switches are counted.
WORKER_KINDS = frozenset({"worker", "naive_worker", "tuned_worker"})
KINDS = {
    "scrapejobs": _SERVICE_KINDS,
    "scrapejobs_one_process": _SERVICE_KINDS,
    "naive": ("naive_worker", "redis", "target"),
    "tuned": ("tuned_worker", "redis", "target"),
}


def _workers(side: str) -> int:
    """The worker processes a side's pool is split among: scrapejobs and the tuned task in
    ``WORKERS``; the naive task as it is often written, and scrapejobs_one_process, in one."""
    return WORKERS if side in ("scrapejobs", "tuned") else 1


def _round(side: str, target: str, latency_ms: int) -> dict[str, float]:
    """One side's run: jobs/s, CPU ms per job of its own processes, by kind and in all."""
    flush_redis()
    if side.startswith("scrapejobs"):
        rate, counts, meter = _scrapejobs(target, latency_ms, workers=_workers(side))
        out = {"succeeded": float(counts.get("succeeded", 0))}
        out.update({key: counts[key] for key in _POOL_FIGURES})
        # PostgreSQL's share by whose statements it ran (part of cpu_ms_per_job_postgres).
        for key, used in counts.items():
            if key.startswith("postgres_cpu_s_for_"):
                out[f"cpu_ms_per_job_postgres_for_{key.removeprefix('postgres_cpu_s_for_')}"] = (
                    used * 1000 / JOBS
                )
    else:
        rate, meter = _baseline(side, target, latency_ms, workers=_workers(side))
        out = {}
    cpu = meter.totals()
    out["jobs_per_s"] = rate
    for kind in KINDS[side]:
        out[f"cpu_ms_per_job_{kind}"] = cpu.get(kind, 0.0) * 1000 / JOBS
    # Only the side's own kinds count: another checkout's benchmark running on the machine
    # meanwhile may match the service's kinds.
    out["cpu_ms_per_job_service"] = sum(cpu.get(k, 0.0) for k in KINDS[side]) * 1000 / JOBS
    # How often the worker processes' threads left the CPU per job: blocked (``waits``: I/O, a
    # lock, the interpreter lock) or preempted for another runnable task (``preemptions``, the
    # machine's CPU short); each is a wait for the CPU on a busy machine (docs/benchmarks.md).
    for kind, (voluntary, involuntary) in meter.switches().items():
        if kind in KINDS[side]:
            out[f"waits_per_job_{kind}"] = voluntary / JOBS
            out[f"preemptions_per_job_{kind}"] = involuntary / JOBS
    return out


def _spread(values: list[float]) -> float:
    return max(values) - min(values) if values else float("nan")


def run() -> None:
    flush_redis()
    target_proc, target = start_target()
    with running(target_proc):
        figure("e2e_jobs", JOBS)
        figure("e2e_worker_concurrency", CONCURRENCY)
        figure("e2e_worker_processes", WORKERS)
        figure("e2e_rounds", ROUNDS)
        for latency_ms in LATENCIES_MS:
            note(
                f"e2e: {JOBS} jobs of {BODY_BYTES} bytes, target latency {latency_ms} ms, thread pool of "
                f"{CONCURRENCY} in {WORKERS} processes (naive and scrapejobs_one_process: in one), {ROUNDS} rounds "
                f"of {', '.join(SIDES)}, the order rotated each round"
            )
            runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
            for r in range(ROUNDS):
                order = SIDES[r % len(SIDES) :] + SIDES[: r % len(SIDES)]
                for side in order:
                    runs[side].append(_round(side, target, latency_ms))
                    note(f"round {r + 1} {side}: {runs[side][-1]['jobs_per_s']:.1f} jobs/s")
            tag = f"e2e_{latency_ms}ms"
            for side in SIDES:
                for key in runs[side][0]:
                    values = [one[key] for one in runs[side]]
                    figure(f"{tag}_{side}_{key}", median(values))
                    if key in ("jobs_per_s", "cpu_ms_per_job_service"):
                        figure(f"{tag}_{side}_{key}_spread", _spread(values))
            # Ratios per round (each side's run of round r, close in time), then their median.
            for base_side in ("tuned", "naive", "scrapejobs_one_process"):
                base = base_side.removeprefix("scrapejobs_")
                rates = [
                    o["jobs_per_s"] / b["jobs_per_s"]
                    for o, b in zip(runs["scrapejobs"], runs[base_side], strict=True)
                ]
                cpus = [
                    o["cpu_ms_per_job_service"] / b["cpu_ms_per_job_service"]
                    for o, b in zip(runs["scrapejobs"], runs[base_side], strict=True)
                ]
                figure(f"{tag}_scrapejobs_to_{base}_ratio", median(rates))
                figure(f"{tag}_scrapejobs_to_{base}_ratio_spread", _spread(rates))
                figure(f"{tag}_cpu_per_job_to_{base}_ratio", median(cpus))
            if latency_ms:
                ceiling = CONCURRENCY / (latency_ms / 1000)
                figure(f"{tag}_littles_law_jobs_per_s", ceiling)
                for side in SIDES:
                    share = median([one["jobs_per_s"] for one in runs[side]]) / ceiling
                    figure(f"{tag}_{side}_share_of_littles_law", share)


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


def _history(n: int) -> None:
    """``python -m bench.e2e history N`` (run by ``_scrapejobs`` with the benchmark's env, before
    the service starts): ``HISTORY``, N final jobs of a tenant of their own with one attempt each,
    over the week before (tests/support/big_ledger.py, settled: nothing in it for the service to
    do), the tables then analysed."""
    import django

    django.setup()
    from tests.support.big_ledger import ledger_build

    ledger_build(jobs=n, attempts_per_job=1, tenants=1, settled=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["submit"]:
        _submit(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1:2] == ["history"]:
        _history(int(sys.argv[2]))
    else:
        run()
