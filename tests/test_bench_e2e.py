"""The e2e benchmark's pool figures (bench/e2e.py, docs/benchmarks.md; NFR-11): how long the
worker's threads sat idle while jobs waited to start, read from the ledger after the run."""

from __future__ import annotations

from typing import Any

import pytest

from bench import e2e


class _Ledger:
    """Answers the two reads of ``_pool_use`` with fixed rows (epoch seconds)."""

    def __init__(self, attempts: list[tuple[float, float]], jobs: list[tuple[float, float | None]]):
        self.attempts = attempts
        self.jobs = jobs

    def execute(self, sql: str) -> Any:
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
    use = e2e._pool_use(ledger, latency_ms=500, started=100.0, ended=102.5)
    assert use["idle_slot_share"] == pytest.approx(0.5 / (2 * 2.5))
    assert use["attempt_overhead_ms"] == pytest.approx(1000 - 500)  # attempts of 1, 2 and 1 s


def test_a_full_pool_or_no_waiting_job_is_no_idle_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e2e, "CONCURRENCY", 1)
    # One thread: the second job waits while the first runs (the pool is full), and the thread
    # idles after the last job with nothing waiting. Times before the run's start count from it.
    ledger = _Ledger(attempts=[(99.0, 101.0), (101.0, 102.0)], jobs=[(99.0, 99.0), (99.5, 101.0)])
    use = e2e._pool_use(ledger, latency_ms=0, started=100.0, ended=104.0)
    assert use["idle_slot_share"] == 0.0
    assert use["attempt_overhead_ms"] == pytest.approx(1500)
