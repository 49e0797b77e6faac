"""Scaling simulation (NFR-8, NFR-28, docs/kubernetes.md): a day of the seed's load replayed
through the worker autoscaling rule of deploy/kubernetes/, with the per-worker capacity measured
on this machine, no cluster needed.

1. Measure: ``BENCH_SCALING_MEASURE_JOBS`` (default 1,000) jobs against a local target answering in
   500 ms, through one worker of ``SCRAPEJOBS_WORKER_CONCURRENCY`` threads (bench/e2e.py's run):
   the wall-clock overhead per job beyond the target's latency (``threads / jobs_per_s -
   latency``), and the worker's resident memory before and at the peak of the run (bench/cpu.py),
   hence the memory per thread in flight. ``BENCH_SCALING_OVERHEAD_S`` skips the measurement.
2. Load: 50,000 users x 8 jobs a day (400,000 jobs), a night rate that rises sixfold at a morning
   (08:00) and an evening (19:00) peak (Gaussian, one hour wide), Poisson arrivals each second,
   every job 20 s at its target.
3. Rule (deploy/kubernetes/keda/scaledobject.yaml, read from the file): every polling interval
   the autoscaler sees the metrics as of the last Prometheus scrape and asks for
   ``max(ceil(in_system / depth_target), ceil(current * oldest_age / age_target))`` workers
   within [min, max]; scale-up at once (at most doubling per step), scale-down after the
   stabilisation window; a new worker takes ``BENCH_SCALING_POD_START_S`` to take jobs.

It prints the workers, the oldest dispatchable job's age and NFR-8's share (first attempt within
60 s) hour by hour and for the day, and draws docs/scaling.png.
"""

from __future__ import annotations

import math
import os
import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.common import figure, flush_redis, note, running, start_target

ROOT = Path(__file__).resolve().parent.parent
SCALED_OBJECT = ROOT / "deploy" / "kubernetes" / "keda" / "scaledobject.yaml"
# Where the day's chart goes (BENCH_SCALING_PLOT: a smoke run of the benchmarks writes elsewhere).
PLOT = Path(os.environ.get("BENCH_SCALING_PLOT") or ROOT / "docs" / "scaling.png")

USERS = 50_000
JOBS_PER_USER = 8
PEAK_FACTOR = 6.0  # peak rate / night rate
PEAKS_H = (8.0, 19.0)
PEAK_WIDTH_H = 1.0  # standard deviation of each peak
JOB_S = 20.0
SLO_S = 60.0
DAY_S = 86_400
SCRAPE_INTERVAL_S = 15  # Prometheus scrape of /metrics (deploy/kubernetes/servicemonitor.yaml)
POD_START_S = float(os.environ.get("BENCH_SCALING_POD_START_S", "30"))
MEASURE_JOBS = int(os.environ.get("BENCH_SCALING_MEASURE_JOBS", "1000"))
MEASURE_LATENCY_MS = 500
# The days replayed, as (load, burst): the seed's day; the same shape at ten times the users (the
# seed's load alone needs a handful of workers); and the seed's day with one batch of BURST_JOBS
# rows arriving at once at BURST_AT_H, which only a rule that looks at the backlog answers in time.
BURST_JOBS = 20_000
BURST_AT_H = 14.0
DAYS = [(1.0, 0), (10.0, 0), (1.0, BURST_JOBS)]


@dataclass(frozen=True)
class Rule:
    """The worker ScaledObject's numbers."""

    min_workers: int
    max_workers: int
    polling_s: int
    cooldown_s: int  # scale-down stabilisation window
    depth_target: float  # jobs in the system (running + dispatchable) per worker
    age_target_s: float  # oldest dispatchable job's age the rule holds the pool to

    @classmethod
    def from_manifest(cls, path: Path = SCALED_OBJECT) -> Rule:
        spec = yaml.safe_load(path.read_text())["spec"]
        thresholds = {t["name"]: float(t["metadata"]["threshold"]) for t in spec["triggers"]}
        behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        return cls(
            min_workers=int(spec["minReplicaCount"]),
            max_workers=int(spec["maxReplicaCount"]),
            polling_s=int(spec["pollingInterval"]),
            cooldown_s=int(behavior["scaleDown"]["stabilizationWindowSeconds"]),
            depth_target=thresholds["jobs-in-system"],
            age_target_s=thresholds["oldest-dispatchable-age"],
        )


def arrival_rate(t_s: float, load: float = 1.0) -> float:
    """Jobs per second at second ``t_s`` of the day, scaled so the day sums to USERS x
    JOBS_PER_USER (times ``load``)."""
    return load * _SCALE * _shape(t_s)


def _shape(t_s: float) -> float:
    h = t_s / 3600
    bumps = sum(math.exp(-0.5 * ((h - p) / PEAK_WIDTH_H) ** 2) for p in PEAKS_H)
    return 1.0 + (PEAK_FACTOR - 1.0) * bumps


_SCALE = USERS * JOBS_PER_USER / sum(_shape(t) for t in range(DAY_S))


@dataclass
class Day:
    """What the simulation saw, second by second (the plot) and in totals."""

    rate: list[float]
    workers: list[int]
    oldest_age_s: list[float]
    jobs: int = 0
    within_slo: int = 0
    worker_seconds: float = 0.0
    max_wait_s: float = 0.0


def simulate(
    rule: Rule, *, slots_per_worker: int, overhead_s: float, load: float = 1.0, burst: int = 0, seed: int = 1
) -> Day:
    rng = random.Random(seed)
    busy_s = JOB_S + overhead_s  # how long a job holds a worker thread
    queue: deque[list[float]] = deque()  # [arrival second, jobs], oldest first
    ends: deque[list[float]] = deque()  # [end second, jobs], in order (every job takes busy_s)
    running_jobs = 0
    # The day starts from the pool the rule holds for the night's load (a warm start).
    night = math.ceil(arrival_rate(0, load) * busy_s / rule.depth_target)
    workers = ready = min(max(night, rule.min_workers), rule.max_workers)
    starting: deque[tuple[float, int]] = deque()  # (ready at, workers)
    seen_depth, seen_age = 0.0, 0.0  # the metrics as of the last scrape
    last_scale_up = 0.0
    down_wish: deque[tuple[int, int]] = deque()  # (second, desired) within the cooldown window
    day = Day(rate=[], workers=[], oldest_age_s=[])
    for t in range(DAY_S):
        rate = arrival_rate(t, load)
        arrivals = _poisson(rng, rate) + (burst if t == int(BURST_AT_H * 3600) else 0)
        if arrivals:
            queue.append([float(t), float(arrivals)])
            day.jobs += arrivals
        while ends and ends[0][0] <= t:
            running_jobs -= int(ends.popleft()[1])
        while starting and starting[0][0] <= t:
            ready += starting.popleft()[1]
        free = ready * slots_per_worker - running_jobs
        started = 0
        while free > 0 and queue:
            cohort = queue[0]
            n = int(min(free, cohort[1]))
            wait = t - cohort[0]
            if wait <= SLO_S:
                day.within_slo += n
            day.max_wait_s = max(day.max_wait_s, wait)
            cohort[1] -= n
            free -= n
            started += n
            if cohort[1] <= 0:
                queue.popleft()
        if started:
            ends.append([t + busy_s, float(started)])
            running_jobs += started
        oldest = t - queue[0][0] if queue else 0.0
        if t % SCRAPE_INTERVAL_S == 0:
            seen_depth = running_jobs + sum(c[1] for c in queue)
            seen_age = oldest
        if t % rule.polling_s == 0:
            desired = max(
                math.ceil(seen_depth / rule.depth_target),
                math.ceil(max(workers, 1) * seen_age / rule.age_target_s),
            )
            desired = min(max(desired, rule.min_workers), rule.max_workers)
            down_wish.append((t, desired))
            while down_wish and down_wish[0][0] < t - rule.cooldown_s:
                down_wish.popleft()
            if desired > workers:
                desired = min(desired, max(2 * workers, workers + 4))  # HPA's scale-up policy
                starting.append((t + POD_START_S, desired - workers))
                workers = desired
                last_scale_up = t
            else:
                # Scale down to the highest wish of the window: the HPA's stabilisation.
                target = max(w for _, w in down_wish)
                if target < workers and t - last_scale_up >= rule.cooldown_s:
                    # A stopping worker takes no new job; its own finish (the graceful stop).
                    drop = workers - target
                    workers = target
                    ready -= min(drop, ready)
        day.worker_seconds += workers
        day.rate.append(rate)
        day.workers.append(workers)
        day.oldest_age_s.append(oldest)
    return day


def _poisson(rng: random.Random, lam: float) -> int:
    # Knuth's method is slow above ~30; a normal approximation there is within a job.
    if lam > 30:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def measure() -> tuple[float, int, float | None]:
    """(overhead per job in s, threads per worker, MiB per thread in flight) on this machine."""
    from bench import e2e

    threads = e2e.CONCURRENCY
    given = os.environ.get("BENCH_SCALING_OVERHEAD_S")
    if given:
        return float(given), threads, None
    flush_redis()
    target_proc, target = start_target()
    with running(target_proc):
        note(
            f"scaling: measuring one worker, {MEASURE_JOBS} jobs at {MEASURE_LATENCY_MS} ms, {threads} threads"
        )
        jobs_per_s, _counts, meter = e2e._scrapejobs(target, MEASURE_LATENCY_MS, jobs=MEASURE_JOBS)
    flush_redis()
    overhead_s = max(threads / jobs_per_s - MEASURE_LATENCY_MS / 1000, 0.0)
    memory = meter.memory_mib()
    figure("scaling_measured_jobs_per_s_500ms", jobs_per_s)
    for kind in ("worker", "writer", "beat"):
        start_mib, top_mib = memory.get(kind, (0.0, 0.0))
        figure(f"scaling_measured_{kind}_rss_start_mib", start_mib)
        figure(f"scaling_measured_{kind}_rss_peak_mib", top_mib)
    first_mib, peak_mib = memory.get("worker", (0.0, 0.0))
    per_thread = (peak_mib - first_mib) / threads
    figure("scaling_measured_worker_mib_per_thread", per_thread)
    return overhead_s, threads, per_thread


def run() -> None:
    rule = Rule.from_manifest()
    overhead_s, threads, _per_thread = measure()
    capacity = threads / (JOB_S + overhead_s)
    figure("scaling_overhead_s_per_job", overhead_s)
    figure("scaling_worker_capacity_jobs_per_s", capacity)
    days = []
    for load, burst in DAYS:
        day = simulate(rule, slots_per_worker=threads, overhead_s=overhead_s, load=load, burst=burst)
        name = ("the seed" if load == 1 else f"{load:g} x the seed") + (
            f" + {burst:,} at once" if burst else ""
        )
        days.append((name, day))
        tag = f"scaling_x{load:g}" + (f"_burst{burst}" if burst else "")
        peak_rate = max(day.rate)
        figure(f"{tag}_jobs", day.jobs)
        figure(f"{tag}_peak_jobs_per_s", peak_rate)
        figure(f"{tag}_mean_jobs_per_s", day.jobs / DAY_S)
        figure(f"{tag}_littles_law_workers_at_peak", peak_rate * (JOB_S + overhead_s) / threads)
        for hour in range(24):
            span = slice(hour * 3600, (hour + 1) * 3600)
            print(
                f"{tag}_hour_{hour:02d}: {sum(day.rate[span]) / 3600:6.1f} jobs/s, "
                f"workers {min(day.workers[span])}-{max(day.workers[span])}, "
                f"oldest dispatchable {max(day.oldest_age_s[span]):5.1f} s",
                flush=True,
            )
        figure(f"{tag}_max_workers", max(day.workers))
        figure(f"{tag}_worker_hours", day.worker_seconds / 3600)
        figure(f"{tag}_worker_hours_if_fixed_at_peak", max(day.workers) * 24)
        figure(f"{tag}_max_oldest_dispatchable_age_s", max(day.oldest_age_s))
        figure(f"{tag}_nfr8_share_within_60s", day.within_slo / day.jobs)
    _plot(days, rule)


def _plot(days: list[tuple[str, Day]], rule: Rule) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = [t / 3600 for t in range(DAY_S)]
    fig, axes = plt.subplots(3, len(days), figsize=(5 * len(days), 7.5), sharex=True, squeeze=False)
    for column, (name, day) in enumerate(days):
        top, middle, bottom = axes[0][column], axes[1][column], axes[2][column]
        top.plot(hours, day.rate, color="tab:blue", linewidth=0.8)
        top.set_ylabel("jobs / s")
        top.set_title(
            f"{name}: {day.jobs:,} jobs of {JOB_S:.0f} s\n"
            f"{day.within_slo / day.jobs:.2%} started within 60 s",
            fontsize=10,
        )
        middle.step(hours, day.workers, color="tab:green", where="post")
        middle.set_ylabel("workers")
        bottom.plot(hours, day.oldest_age_s, color="tab:red", linewidth=0.8)
        bottom.axhline(rule.age_target_s, color="grey", linestyle="--", linewidth=0.8, label="age target")
        bottom.axhline(SLO_S, color="black", linestyle=":", linewidth=0.8, label="NFR-8: 60 s")
        bottom.set_ylim(0, SLO_S * 1.2)
        bottom.set_ylabel("oldest dispatchable (s)")
        bottom.set_xlabel("hour of the day")
        bottom.legend(loc="upper right", fontsize=8)
        bottom.set_xticks(range(0, 25, 4))
    fig.tight_layout()
    fig.savefig(PLOT, dpi=80)
    figure("scaling_plot", str(PLOT.relative_to(ROOT)) if PLOT.is_relative_to(ROOT) else str(PLOT))
