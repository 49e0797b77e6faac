"""The peak ladder's plan (bench/peak.py, docs/benchmarks.md ``peak``; NFR-2, NFR-8, NFR-17): the
multiples to climb, the worker layout for a rate, what this machine allows (threads, descriptors,
PostgreSQL and Redis connections, memory) and, for a rung that did not hold, the bottleneck named
from what was measured. Pure functions and /proc reads; tests/test_bench_peak.py holds them."""

from __future__ import annotations

import math
import os
import resource
from dataclasses import dataclass
from pathlib import Path

LADDER = (1, 2, 5, 10)
HEADROOM = 1.05  # worker slots per fetch in flight that Little's law predicts
# Connections of the bench's other processes, each pool bounded by the bench
# (SCRAPEJOBS_DB_POOL_MAX_SIZE): the web's two processes 10 each, control 20 (its default: the
# writer's appliers and the nudged runners), beat 2, and the bench's own sampler and queries 3.
WEB_DB_POOL, CONTROL_DB_POOL, BEAT_DB_POOL, BENCH_CONNECTIONS = 10, 20, 2, 3
OTHER_CONNECTIONS = 2 * WEB_DB_POOL + CONTROL_DB_POOL + BEAT_DB_POOL + BENCH_CONNECTIONS
WORKER_DB_POOL_MAX = 20
WORKER_CONNECTIONS_MAX = 60
# Per worker process besides its slots: Celery's, kombu's and the service's own threads
# (scrapejobs/processes.py BACKGROUND_THREADS) and descriptors (broker, pools, logs).
THREADS_PER_PROCESS, FDS_PER_PROCESS = 40, 128
OTHER_THREADS = 400  # web, control, beat, target, submitter, sampler
WORKER_BASE_MIB, WORKER_MIB_PER_SLOT = 200.0, 0.5  # docs/kubernetes.md: 0.07-0.16 MiB per thread measured
CPU_BOUND_SHARE = 0.9  # of cores x wall time
MEMORY_LOW_SHARE = 0.05  # of MemTotal still available


def ladder(multiple: int) -> list[int]:
    """The rungs up to ``multiple``: 1, 2, 5, 10 as far as it goes, and ``multiple`` itself last."""
    rungs = [m for m in LADDER if m <= multiple]
    return rungs if multiple in rungs or multiple < 1 else [*rungs, multiple]


@dataclass(frozen=True)
class Layout:
    workers: int
    threads: int  # per worker process
    db_pool: int  # per worker process

    @property
    def slots(self) -> int:
        return self.workers * self.threads


def worker_connections(free: int) -> int:
    """The workers' PostgreSQL connections in all: what the server has free once the bench's other
    processes have theirs (``OTHER_CONNECTIONS``), at most 60. A server's default 100
    (97 for clients) leaves 52."""
    return max(0, min(WORKER_CONNECTIONS_MAX, free - OTHER_CONNECTIONS))


def layout(
    *, rate: float, target_s: float, max_threads: int, cores: int, worker_connections: int = 60
) -> Layout:
    """Worker processes for ``rate`` jobs/s that each hold a slot ``target_s`` (Little's law, 5 %
    to spare): at least one per core (one Python process uses at most one core, the GIL), and
    as few more as keep each at most ``max_threads`` (a process costs ~200 MiB and its own
    broker, pool and lease polling; a thread waiting on a socket costs little), the slots split
    evenly. They share ``worker_connections`` PostgreSQL connections, at most 20 each (a fetch
    holds none, NFR-11; the pool serves claims and lease renewals). 28/s x 20 s on a 2-core
    machine: 2 x 294 threads; 280/s: 6 x 980."""
    slots = max(1, math.ceil(rate * target_s * HEADROOM - 1e-9))
    workers = max(1, cores, math.ceil(slots / max_threads))
    pool = max(1, min(WORKER_DB_POOL_MAX, worker_connections // workers))
    return Layout(workers=workers, threads=math.ceil(slots / workers), db_pool=pool)


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def threads_now() -> tuple[int, int]:
    """(threads on the machine, threads of this user): ``Threads`` of every /proc/<pid>/status."""
    total = mine = 0
    uid = os.getuid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            lines = Path(entry.path, "status").read_text().splitlines()
        except OSError:
            continue
        fields = {k: v.split() for k, _, v in (line.partition(":") for line in lines)}
        n = int(fields.get("Threads", ["0"])[0])
        total += n
        mine += n if int(fields.get("Uid", ["-1"])[0]) == uid else 0
    return total, mine


def threads_free() -> tuple[int, str]:
    """The most threads this user may still start, and the limit that says so."""
    total, mine = threads_now()
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    limits = {
        "kernel.threads-max": (_read_int("/proc/sys/kernel/threads-max"), total),
        "kernel.pid_max": (_read_int("/proc/sys/kernel/pid_max"), total),
        "ulimit -u": (None if nproc == resource.RLIM_INFINITY or os.getuid() == 0 else nproc, mine),
        "cgroup pids.max": (
            _read_int("/sys/fs/cgroup/pids.max"),
            _read_int("/sys/fs/cgroup/pids.current") or 0,
        ),
    }
    free = {name: cap - used for name, (cap, used) in limits.items() if cap is not None}
    if not free:
        return 1 << 30, "none"
    name = min(free, key=lambda k: free[k])
    return free[name], f"{name} ({limits[name][0]:,}, {limits[name][1]:,} in use)"


def raise_fd_limit() -> int:
    """Raise this process's descriptor limit (``ulimit -n``) to its hard limit, which the service's
    processes started from here inherit: the limit they get."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft if soft != resource.RLIM_INFINITY else 1 << 30


def _meminfo_mib(key: str) -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def mem_available_mib() -> float:
    return _meminfo_mib("MemAvailable")


def mem_total_mib() -> float:
    return _meminfo_mib("MemTotal")


@dataclass(frozen=True)
class Host:
    """What the machine allows, read before a rung starts."""

    threads_free: int
    threads_limit: str
    fd_limit: int
    pg_connections_free: int  # max_connections - superuser_reserved_connections - in use
    pg_max_connections: int
    redis_maxclients: int
    redis_clients: int
    mem_available_mib: float


def limits(plan: Layout, host: Host, *, in_flight: float) -> list[str]:
    """Each limit of this machine the rung would pass, said precisely; empty when none."""
    out = []
    threads = plan.slots + plan.workers * THREADS_PER_PROCESS + OTHER_THREADS
    if threads > host.threads_free:
        out.append(
            f"threads: the layout needs ~{threads:,}, {host.threads_limit} leaves {host.threads_free:,}"
        )
    worker_fds = plan.threads * 2 + FDS_PER_PROCESS  # a fetch's socket, a thread's Redis connection
    target_fds = math.ceil(in_flight * HEADROOM) + FDS_PER_PROCESS
    if max(worker_fds, target_fds) > host.fd_limit:
        out.append(
            f"file descriptors: a worker process needs ~{worker_fds:,} and the target ~{target_fds:,}, "
            f"ulimit -n is {host.fd_limit:,} (raise the hard limit)"
        )
    pg_need = plan.workers * plan.db_pool + OTHER_CONNECTIONS
    if pg_need > host.pg_connections_free or plan.db_pool < 2:
        out.append(
            f"postgres connections: {plan.workers} workers x {plan.db_pool} + {OTHER_CONNECTIONS} others "
            f"= {pg_need}, the server has {host.pg_connections_free} free of max_connections "
            f"{host.pg_max_connections} (at least 2 per worker)"
        )
    redis_need = plan.slots + 64 * (plan.workers + 4)
    if redis_need > host.redis_maxclients - host.redis_clients:
        out.append(
            f"redis clients: up to ~{redis_need:,} (a connection per worker thread), maxclients "
            f"{host.redis_maxclients:,} with {host.redis_clients:,} connected"
        )
    mem = plan.workers * WORKER_BASE_MIB + plan.slots * WORKER_MIB_PER_SLOT
    if mem > host.mem_available_mib * 0.8:
        out.append(f"memory: workers need ~{mem:,.0f} MiB, {host.mem_available_mib:,.0f} MiB available")
    return out


@dataclass(frozen=True)
class Measured:
    """What a rung measured that names its bottleneck."""

    cores: int
    wall_s: float
    cpu_s: dict[str, float]  # this benchmark's processes, by kind
    machine_busy_share: float  # every process on the machine: busy CPU / (cores x wall)
    mem_available_min_mib: float
    mem_total_mib: float
    intake_p99_ms: float
    intake_aim_ms: float
    intake_failed: int  # errors and never sent
    started_share: float
    started_aim: float
    succeeded: int
    submitted: int
    waiting_while_free_s: int  # seconds with jobs due but queued while worker slots were free
    slots: int
    in_flight_max: int
    log_limits: tuple[str, ...]  # limits the processes' logs named (too many clients, EMFILE...)
    exited: tuple[str, ...]  # service processes that exited during the run


def bottleneck(m: Measured) -> tuple[str, str]:
    """(kind, what was measured) of the first of: a process that exited, a limit its log named,
    memory, CPU (with the kind of process that used most), the dispatcher (jobs due and queued
    while worker slots were free), the worker slots, intake, failed jobs."""
    total = sum(m.cpu_s.values())
    ours = total / (m.cores * m.wall_s) if m.wall_s > 0 else float("nan")
    top = max(m.cpu_s, key=lambda k: m.cpu_s[k], default="?")
    cpu = (
        f"CPU {m.machine_busy_share:.2f} of {m.cores} cores x {m.wall_s:.0f} s busy "
        f"({ours:.2f} this benchmark's; most by {top}: {m.cpu_s.get(top, 0.0) / max(total, 1e-9) * 100:.0f} %)"
    )
    if m.exited:
        return "process exited", f"{', '.join(m.exited)} exited during the run; {cpu}"
    if m.log_limits:
        return m.log_limits[0].split(" (", 1)[0], "; ".join(m.log_limits)
    if m.mem_available_min_mib < MEMORY_LOW_SHARE * m.mem_total_mib:
        left = f"{m.mem_available_min_mib:,.0f} MiB of {m.mem_total_mib:,.0f} available at the lowest"
        return "memory", f"{left}; {cpu}"
    if m.machine_busy_share >= CPU_BOUND_SHARE:
        # Mostly someone else's on a shared machine: the figure is the machine's, not the service's.
        return (f"CPU ({top})" if ours >= m.machine_busy_share / 2 else "CPU (other processes)"), cpu
    if m.waiting_while_free_s >= 5 and m.started_share < m.started_aim:
        return "dispatcher", (
            f"jobs due but not started for {m.waiting_while_free_s} s while worker slots were free "
            f"(at most {m.in_flight_max:,} of {m.slots:,} in flight); {cpu}"
        )
    if m.started_share < m.started_aim and m.in_flight_max >= 0.95 * m.slots:
        return "worker slots", f"{m.in_flight_max:,} of {m.slots:,} in flight at the most; {cpu}"
    if m.intake_p99_ms > m.intake_aim_ms or m.intake_failed:
        return "intake", (
            f"p99 {m.intake_p99_ms:,.0f} ms (aim {m.intake_aim_ms:g}), {m.intake_failed} not accepted; {cpu}"
        )
    if m.succeeded < m.submitted:
        return "jobs failed", f"{m.submitted - m.succeeded} of {m.submitted} did not succeed; {cpu}"
    return "not named", cpu


LOG_LIMITS = {
    "too many clients": "postgres max_connections (a process's log: too many clients)",
    "Too many open files": "file descriptors (a process's log: Too many open files)",
    "can't start new thread": "threads (a process's log: can't start new thread)",
    "max number of clients reached": "redis maxclients (a process's log)",
    "MemoryError": "memory (a process's log: MemoryError)",
}


def log_limits(outputs: dict[str, str]) -> tuple[str, ...]:
    """The limits the processes' logs name, each once with the processes that said it."""
    found: dict[str, list[str]] = {}
    for name, text in outputs.items():
        for needle, what in LOG_LIMITS.items():
            if needle in text:
                found.setdefault(what, []).append(name)
    return tuple(f"{what} in {', '.join(names)}" for what, names in found.items())


def cpu_busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU since boot (/proc/stat): the machine's CPU use between
    two readings, whoever used it."""
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)
