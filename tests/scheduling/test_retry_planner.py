"""The retry planner (NFR-3, NFR-5): pure functions, checked with a seeded rng."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from apps.jobs.lifecycle import backoff_seconds, plan_after_attempt
from apps.jobs.models import AttemptOutcome, JobStatus

NOW = datetime(2030, 1, 1, tzinfo=UTC)
BASE, CAP = 2.0, 600.0


def plan(**kw):
    args = {
        "outcome": AttemptOutcome.TEMPORARY,
        "attempt": 1,
        "max_attempts": 5,
        "cancel_requested": False,
        "retry_after_s": None,
        "now": NOW,
        "base": BASE,
        "cap": CAP,
        "rng": random.Random(7),
    }
    args.update(kw)
    return plan_after_attempt(**args)


def test_backoff_ceilings_double_per_attempt_and_stop_at_the_cap():
    rng = random.Random(42)
    highest = []
    for attempt in range(1, 13):
        samples = [backoff_seconds(attempt=attempt, base=BASE, cap=CAP, rng=rng) for _ in range(3000)]
        ceiling = min(CAP, BASE * 2 ** (attempt - 1))
        assert all(0 <= s <= ceiling for s in samples)
        # Full jitter: the whole range up to the ceiling is used, down to near zero.
        assert max(samples) > 0.98 * ceiling
        assert min(samples) < 0.02 * ceiling
        highest.append(max(samples))
    # The ceilings grow until the cap, then stay under it.
    growing = [h for h in highest if h < 0.98 * CAP]
    assert growing == sorted(growing) and len(growing) >= 8
    assert all(h <= CAP for h in highest)
    assert highest[-1] > 0.98 * CAP


def test_the_same_seed_gives_the_same_delays():
    a = [backoff_seconds(attempt=n, base=BASE, cap=CAP, rng=random.Random(3)) for n in range(1, 6)]
    b = [backoff_seconds(attempt=n, base=BASE, cap=CAP, rng=random.Random(3)) for n in range(1, 6)]
    assert a == b


def test_a_temporary_failure_waits_in_the_queue_until_not_before():
    nxt = plan(attempt=3)
    assert nxt.status == JobStatus.QUEUED
    assert NOW <= nxt.not_before <= NOW + timedelta(seconds=BASE * 4)


@pytest.mark.parametrize("attempt", [1, 2, 5, 10])
def test_retry_after_wins_over_a_shorter_backoff(attempt):
    """NFR-5: never sooner than the target's Retry-After."""
    nxt = plan(attempt=attempt, max_attempts=20, retry_after_s=120.0)
    assert nxt.status == JobStatus.QUEUED
    assert nxt.not_before >= NOW + timedelta(seconds=120)


def test_a_backoff_longer_than_retry_after_is_kept():
    # attempt 12: ceiling is the cap (600 s); with this seed the draw is well above 1 s.
    nxt = plan(attempt=12, max_attempts=20, retry_after_s=1.0, rng=random.Random(1))
    assert nxt.not_before > NOW + timedelta(seconds=1)


def test_a_permanent_failure_fails_at_once_whatever_attempts_are_left():
    assert plan(outcome=AttemptOutcome.PERMANENT, attempt=1, max_attempts=5).status == JobStatus.FAILED


def test_a_temporary_failure_of_the_last_attempt_fails_the_job():
    nxt = plan(attempt=5, max_attempts=5, retry_after_s=3.0)
    assert nxt.status == JobStatus.FAILED and nxt.not_before is None


def test_a_lost_attempt_is_retried_like_a_temporary_failure():
    assert plan(outcome=AttemptOutcome.LOST, attempt=1).status == JobStatus.QUEUED
    assert plan(outcome=AttemptOutcome.LOST, attempt=5, max_attempts=5).status == JobStatus.FAILED


def test_a_cancel_asked_for_while_running_wins_over_a_retry():
    assert plan(cancel_requested=True).status == JobStatus.CANCELLED


def test_success_is_final():
    assert plan(outcome=AttemptOutcome.SUCCEEDED, attempt=5, max_attempts=5).status == JobStatus.SUCCEEDED
