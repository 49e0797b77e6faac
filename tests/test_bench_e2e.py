"""The e2e benchmark's pool figures (bench/e2e.py, docs/benchmarks.md; NFR-11): how long the
worker's threads sat idle while jobs waited to start, read from the ledger after the run."""

from __future__ import annotations

from typing import Any

import pytest

from bench import e2e

TENANT = "7d3c6a86-0e0b-4bd4-9a4e-2f5b6f3f9b10"


class _Ledger:
    """Answers the two reads of ``_pool_use`` with fixed rows (epoch seconds)."""

    def __init__(self, attempts: list[tuple[float, float]], jobs: list[tuple[float, float | None]]):
        self.attempts = attempts
        self.jobs = jobs

    def execute(self, sql: str, params: list[Any]) -> Any:
        assert params == [TENANT]  # only the run's tenant: the ledger's history is another's
        rows = self.attempts if "jobs_attempt" in sql else self.jobs
        return type("Rows", (), {"fetchall": lambda _self: rows})()


def test_a_thread_between_attempts_with_a_job_waiting_is_idle_and_a_folded_receipt_does_not_matter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(e2e, "CONCURRENCY", 2)
    # Three jobs at 0 on two threads: A and B claimed at once, C waits until 1.5 although the
    # first thread was free at 1 (0.5 thread-seconds idle with work waiting); none waits after.
    ledger = _Ledger(
        attempts=[(100.0, 101.0), (100.0, 102.0), (101.5, 102.5)],
        jobs=[(100.0, 100.0), (100.0, 100.0), (100.0, 101.5)],
    )
    use = e2e._pool_use(ledger, TENANT, latency_ms=500, started=100.0, ended=102.5)
    assert use["idle_slot_share"] == pytest.approx(0.5 / (2 * 2.5))
    assert use["attempt_overhead_ms"] == pytest.approx(1000 - 500)  # attempts of 1, 2 and 1 s
    # The first thread idles from 2 with nothing left to take: the run's drain, not the dispatcher.
    assert use["drain_share"] == pytest.approx(0.5 / (2 * 2.5))
    assert use["unfed_share"] == 0.0
    assert use["pool_full_s"] == 0.0
    assert use["fold_lag_s"] == 0.0


def test_a_full_pool_or_no_waiting_job_is_no_idle_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e2e, "CONCURRENCY", 1)
    # One thread: the second job waits while the first runs (the pool is full), and the thread
    # idles after the last job with nothing waiting. Times before the run's start count from it.
    ledger = _Ledger(attempts=[(99.0, 101.0), (101.0, 102.0)], jobs=[(99.0, 99.0), (99.5, 101.0)])
    use = e2e._pool_use(ledger, TENANT, latency_ms=0, started=100.0, ended=104.0)
    assert use["idle_slot_share"] == 0.0
    assert use["attempt_overhead_ms"] == pytest.approx(1500)
    assert use["drain_share"] == pytest.approx(2 / 4)  # 102 to 104, every job submitted
    assert use["fold_lag_s"] == pytest.approx(2.0)  # the last attempt ended at 102, the run at 104


def test_a_thread_with_no_job_submitted_yet_is_unfed_and_the_pool_is_full_once_every_thread_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(e2e, "CONCURRENCY", 2)
    # The second job is submitted 0.4 s after the first: the second thread idles until then with
    # nothing to take (the intake's pace, not the dispatcher's), then the first thread idles for
    # the last 0.4 s (the drain). Every thread is in an attempt from 100.4.
    ledger = _Ledger(attempts=[(100.0, 101.0), (100.4, 101.4)], jobs=[(100.0, 100.0), (100.4, 100.4)])
    use = e2e._pool_use(ledger, TENANT, latency_ms=1000, started=100.0, ended=101.5)
    assert use["idle_slot_share"] == 0.0
    assert use["unfed_share"] == pytest.approx(0.4 / (2 * 1.5))
    assert use["drain_share"] == pytest.approx((0.4 + 2 * 0.1) / (2 * 1.5))
    assert use["pool_full_s"] == pytest.approx(0.4)
    assert use["fold_lag_s"] == pytest.approx(0.1)


def test_the_four_sides_alternate_and_the_layout_is_compared_round_by_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every round runs each side once, the order rotated (A B C D, B C D A, …), the naive task
    in one process and the tuned one in scrapejobs's worker processes; each ratio is the median
    of the rounds' own ratios (NFR-11, docs/benchmarks.md)."""
    from contextlib import nullcontext

    calls: list[tuple[str, int]] = []
    rates = {"naive": 100.0, "tuned": 200.0, "scrapejobs": 180.0, "scrapejobs_one_process": 150.0}

    def meter(totals: dict[str, float], switches: dict[str, tuple[int, int]]) -> Any:
        return type("Meter", (), {"totals": lambda _self: totals, "switches": lambda _self: switches})()

    def baseline(kind: str, target: str, latency_ms: int, *, workers: int) -> tuple[float, Any]:
        calls.append((kind, workers))
        used = meter(
            {f"{kind}_worker": 1.0, "redis": 0.1, "target": 0.1},
            {"worker": (0, 0), "naive_worker": (0, 0), "tuned_worker": (0, 0), f"{kind}_worker": (4000, 400)},
        )
        return rates[kind] * (1 + len(calls) / 100), used

    def scrapejobs(target: str, latency_ms: int, *, workers: int = 1) -> tuple[float, dict[str, float], Any]:
        side = "scrapejobs" if workers == e2e.WORKERS else "scrapejobs_one_process"
        calls.append((side, workers))
        used = meter({"worker": 1.0, "postgres": 1.0}, {"worker": (12000, 2000), "tuned_worker": (0, 0)})
        counts = {"succeeded": 40.0, **dict.fromkeys(e2e._POOL_FIGURES, 0.1)}
        return rates[side] * (1 + len(calls) / 100), counts, used

    figures: dict[str, float] = {}
    monkeypatch.setattr(e2e, "LATENCIES_MS", [500])
    monkeypatch.setattr(e2e, "ROUNDS", 4)
    monkeypatch.setattr(e2e, "WORKERS", 4)
    monkeypatch.setattr(e2e, "_baseline", baseline)
    monkeypatch.setattr(e2e, "_scrapejobs", scrapejobs)
    monkeypatch.setattr(e2e, "flush_redis", lambda: None)
    monkeypatch.setattr(e2e, "start_target", lambda: (None, "http://127.0.0.1:1"))
    monkeypatch.setattr(e2e, "running", lambda *_: nullcontext())
    monkeypatch.setattr(e2e, "note", lambda _text: None)
    monkeypatch.setattr(e2e, "figure", lambda name, value, unit="": figures.__setitem__(name, value))

    e2e.run()

    sides = [side for side, _ in calls]
    assert sides[:4] == ["naive", "tuned", "scrapejobs", "scrapejobs_one_process"]
    assert sides[4:8] == ["tuned", "scrapejobs", "scrapejobs_one_process", "naive"]
    assert sides[8:12] == ["scrapejobs", "scrapejobs_one_process", "naive", "tuned"]
    assert sides[12:16] == ["scrapejobs_one_process", "naive", "tuned", "scrapejobs"]
    assert {workers for side, workers in calls if side == "naive"} == {1}
    assert {workers for side, workers in calls if side in ("tuned", "scrapejobs")} == {4}
    assert {workers for side, workers in calls if side == "scrapejobs_one_process"} == {1}
    assert figures["e2e_worker_processes"] == 4
    # Round by round: scrapejobs's rate over the one-process run's, close in time (the rates drift
    # with the call count here, as a noisy machine's do); their median, not the medians' ratio.
    ours = [r for r, (side, _) in zip(range(16), calls, strict=True) if side == "scrapejobs"]
    one = [r for r, (side, _) in zip(range(16), calls, strict=True) if side == "scrapejobs_one_process"]
    per_round = sorted(
        (rates["scrapejobs"] * (1 + (a + 1) / 100)) / (rates["scrapejobs_one_process"] * (1 + (b + 1) / 100))
        for a, b in zip(ours, one, strict=True)
    )
    assert figures["e2e_500ms_scrapejobs_to_one_process_ratio"] == pytest.approx(
        (per_round[1] + per_round[2]) / 2
    )
    assert figures["e2e_500ms_cpu_per_job_to_one_process_ratio"] == pytest.approx(1.0)
    assert figures["e2e_500ms_scrapejobs_one_process_share_of_littles_law"] > 0
    # Context switches per job of each side's own worker kind only (JOBS = 2,000).
    assert figures["e2e_500ms_scrapejobs_waits_per_job_worker"] == 12000 / e2e.JOBS
    assert figures["e2e_500ms_scrapejobs_preemptions_per_job_worker"] == 2000 / e2e.JOBS
    assert figures["e2e_500ms_tuned_waits_per_job_tuned_worker"] == 4000 / e2e.JOBS
    assert figures["e2e_500ms_naive_preemptions_per_job_naive_worker"] == 400 / e2e.JOBS
    assert not any(name.startswith("e2e_500ms_scrapejobs_waits_per_job_tuned") for name in figures)


@pytest.mark.django_db
def test_the_history_is_final_jobs_of_another_tenant_with_their_attempts_over_the_week_before() -> None:
    """``BENCH_E2E_HISTORY``: the ledger a live service has, made before a service round (the
    plans PostgreSQL keeps from a run's first seconds are then made for a table of that size):
    final jobs, each with its one attempt, none of them anything for the service to do."""
    from datetime import timedelta

    from django.db.models import Count, Max, Min
    from django.utils import timezone

    from apps.jobs.models import FINAL_STATUSES, Attempt, Job

    e2e._history(3000)  # a job every 3.4 minutes: the last 10 minutes hold a few

    jobs = Job.objects.all()
    assert jobs.count() == 3000 and len(set(jobs.values_list("tenant_id", flat=True))) == 1
    assert set(jobs.values_list("status", flat=True)) <= set(FINAL_STATUSES)  # none queued or running
    assert not jobs.filter(final_published_at__isnull=True).exists()  # no end-of-job work waits
    assert set(jobs.annotate(n=Count("attempt_set")).values_list("n", flat=True)) == {1}
    assert Attempt.objects.count() == 3000 and not Attempt.objects.filter(finished_at__isnull=True).exists()
    span = jobs.aggregate(first=Min("created_at"), last=Max("created_at"))
    assert timedelta(days=6) < timezone.now() - span["first"] < timedelta(days=8)  # the week before
    assert timezone.now() - span["last"] < timedelta(minutes=10)  # the last minutes' jobs are final too


def test_the_meter_counts_the_context_switches_of_the_threads_of_the_kinds_it_is_asked_for() -> None:
    """bench/cpu.py: each thread that blocks (here: sleeps) leaves the CPU voluntarily; the threads
    of a process of a counted kind, started while the meter runs, count from zero, and a process of
    another kind is not counted."""
    import subprocess
    import sys

    from bench.cpu import CpuMeter

    sleeper = (
        "import sys, threading, time\n"
        "sys.stdin.readline()\n"
        "slept, end = threading.Barrier(4), threading.Event()\n"
        "def run():\n"
        "    for _ in range(50):\n"
        # time is not the subject: each sleep is a block, counted as one voluntary switch
        "        time.sleep(0.001)\n"
        "    slept.wait()\n"
        "    end.wait()\n"
        "for _ in range(3):\n"
        "    threading.Thread(target=run, daemon=True).start()\n"
        "slept.wait()\n"
        "print('done', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    procs = {
        kind: subprocess.Popen(
            [sys.executable, "-c", sleeper, kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for kind in ("counted", "other")
    }
    pids = {p.pid: kind for kind, p in procs.items()}
    try:
        with CpuMeter(lambda pid, _cmd, _env: pids.get(pid), switches_of=frozenset({"counted"})) as meter:
            for p in procs.values():
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            for p in procs.values():
                assert p.stdout is not None
                assert p.stdout.readline() == "done\n"  # still alive: the meter's exit samples it
        voluntary, involuntary = meter.switches()["counted"]
        # 150 sleeps in threads started during the run (alive when the meter last sampled them),
        # each a switch; the main thread waited on its pipe and on the threads (a few more).
        assert 150 <= voluntary < 1000, (voluntary, involuntary)
        assert set(meter.switches()) == {"counted"}
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
