"""What follows an attempt: the job's next state (the retry planner, NFR-3).

Pure functions, no I/O: the writer applies their answer inside its batch transaction, and tests
check them directly as well as through the running system.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from apps.jobs.models import AttemptOutcome, JobStatus


def backoff_seconds(*, attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with full jitter: uniform(0, min(cap, base * 2**(attempt-1))).

    Full jitter (not "equal" jitter) so that a thousand jobs that failed in the same second do
    not come back in the same second."""
    ceiling = min(cap, base * (2 ** max(attempt - 1, 0)))
    return (rng or random).uniform(0, ceiling)


@dataclass(frozen=True)
class NextState:
    status: str
    not_before: datetime | None = None


def plan_after_attempt(
    *,
    outcome: str,
    attempt: int,
    max_attempts: int,
    cancel_requested: bool,
    retry_after_s: float | None,
    now: datetime,
    base: float,
    cap: float,
    rng: random.Random | None = None,
) -> NextState:
    """The job's state after attempt ``attempt`` ended with ``outcome``.

    - success is final;
    - a cancel asked for while running wins over any retry;
    - a permanent failure, or a temporary one that used the last attempt, is ``failed``;
    - a temporary failure (or a lost attempt) waits in ``queued`` until ``not_before``: the
      backoff, but never sooner than the target's own ``Retry-After``;
    - a deferred attempt (a redirect hop's domain said wait) waits ``retry_after_s`` exactly, and
      is never the last: it does not count.
    """
    if outcome == AttemptOutcome.SUCCEEDED:
        return NextState(JobStatus.SUCCEEDED)
    if cancel_requested or outcome == AttemptOutcome.CANCELLED:
        return NextState(JobStatus.CANCELLED)
    if outcome == AttemptOutcome.DEFERRED:
        # Waiting for a domain's turn: exactly its time, no backoff, and no attempt spent (the
        # fold gives the attempt back), so never the last one.
        return NextState(JobStatus.QUEUED, now + timedelta(seconds=max(0.0, retry_after_s or 0.0)))
    if outcome == AttemptOutcome.PERMANENT or attempt >= max_attempts:
        return NextState(JobStatus.FAILED)
    delay = backoff_seconds(attempt=attempt, base=base, cap=cap, rng=rng)
    if retry_after_s is not None:
        delay = max(delay, retry_after_s)
    return NextState(JobStatus.QUEUED, now + timedelta(seconds=delay))
