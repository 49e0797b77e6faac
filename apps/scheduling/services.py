"""The scheduler's writes: the stuck-sweeper and the dead letters (NFR-4, FR-8).

The sweeper decides when to sweep and how far back an expired lease surely means a dead worker
(the receipts still waiting for the writer say so); the sweeps themselves, like every change of a
job, are the ledger's (``apps.jobs.sweeping``). A dead letter is a failed job; a discard is a
small row of this app's own, so the ledger stays untouched.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterable

from django.db import connection, transaction
from django.utils import timezone

from apps.jobs.cancel_requeue import jobs_requeue
from apps.jobs.models import JobStatus
from apps.jobs.selectors import jobs_failed_attempts
from apps.jobs.sweeping import (
    SWEEP_BATCH_SIZE,
    SweepStats,
    jobs_lose_expired_leases,
    jobs_sweep_unclaimed,
)
from apps.redis_clients import lease_mark_key, state_redis
from apps.writer.selectors import receipts_waiting, receipts_waiting_for_s

logger = logging.getLogger(__name__)

# A receipt is added to the stream a moment after its worker's last renewal: this much more is
# waited for, beyond the oldest waiting receipt's age, before an expired lease counts as a dead
# worker.
RECEIPT_CLOCK_MARGIN_S = 1.0


def jobs_sweep_expired_leases(
    *, batch_size: int = SWEEP_BATCH_SIZE, rng: random.Random | None = None
) -> SweepStats:
    """Running jobs whose lease expired (their worker died or hangs) go back to ``queued``, their
    attempt lost (``apps.jobs.sweeping.jobs_lose_expired_leases``).

    The rule (NFR-3, NFR-4): an attempt is lost only when its lease expired in
    the database, **and** no receipt for it waits in the receipts stream (the writer will apply
    it: ``apps.writer.selectors.receipts_waiting``), **and** its worker's lease mark in Redis has
    lapsed (a live worker that could not renew in the database, PostgreSQL being away, keeps
    writing it: ``apps.scraping.leases``). So after a PostgreSQL outage the writer's receipts and
    the live workers' next renewals win over the sweeper, and no finished or still-running fetch
    is thrown away; a dead worker's job is still swept once its lease and its mark have both
    run out (both last ``SCRAPEJOBS_LEASE_S`` after the worker's last word)."""
    # A worker stops renewing its lease once it has handed its receipt over; the job then stays
    # `running` until the writer applies the receipt. If the writer is behind (or restarting),
    # that is not a dead worker: only leases that expired before the oldest receipt still
    # waiting were surely abandoned. Without this, a lagging writer made the sweeper mark
    # finished attempts lost and fetch them again, which made the writer lag more.
    # One clock: leases are written and compared on the database's; the
    # receipt's wait is a duration measured on Redis's alone, so "expired before the oldest
    # waiting receipt" is "expired longer ago than that receipt has waited".
    waited_s = receipts_waiting_for_s()
    expired_for_s = 0.0 if waited_s is None else waited_s + RECEIPT_CLOCK_MARGIN_S
    return jobs_lose_expired_leases(
        expired_for_s=expired_for_s, batch_size=batch_size, rng=rng, keep=attempts_not_lost
    )


def attempts_not_lost(attempts: list[tuple[str, int]]) -> set[tuple[str, int]]:
    """Of these running attempts whose lease expired in the database, the ones that are not lost:
    their receipt waits for the writer, or their worker's lease mark in Redis is alive."""
    keep = receipts_waiting(attempts)
    rest = [a for a in attempts if a not in keep]
    if rest:
        marks = state_redis().mget([lease_mark_key(job_id) for job_id, _ in rest])
        keep |= {a for a, mark in zip(rest, marks, strict=True) if mark is not None and mark == str(a[1])}
    return keep


def jobs_sweep_stuck() -> SweepStats:
    """One sweeper tick: expired leases first (they turn into unpublished queued jobs, which the
    publisher picks up directly), then published-but-untaken jobs."""
    stats = jobs_sweep_expired_leases()
    stats.republished = jobs_sweep_unclaimed()
    if stats.lost or stats.republished:
        logger.warning(
            "sweeper: %d lost attempts (%d requeued, %d failed, %d cancelled), %d jobs republished",
            stats.lost,
            stats.requeued,
            stats.failed,
            stats.cancelled,
            stats.republished,
        )
    if stats.kept:
        logger.info("sweeper: %d expired leases left running (receipt waiting or worker alive)", stats.kept)
    return stats


# --- Dead letters (FR-8) ------------------------------------------------------------


def dead_letters_discard(*, job_ids: Iterable[uuid.UUID | str], discarded_by: str = "") -> int:
    """Take failed jobs off the dead-letter list without touching the jobs themselves: each job
    stays ``failed`` with its history (callers still read it); only the operators' list forgets
    this failure. The discard remembers the attempt count it saw, so a job that is requeued
    later (by anyone) and fails again is a new dead letter. Returns how many were discarded."""
    ids = [str(i) for i in job_ids]
    if not ids:
        return 0
    with transaction.atomic():
        seen = jobs_failed_attempts(job_ids=ids)
        if not seen:
            return 0
        with connection.cursor() as cur:
            cur.execute(
                """
                INSERT INTO scheduling_discardeddeadletter (job_id, attempts, discarded_at, discarded_by)
                SELECT id, attempts, %s, %s FROM unnest(%s::uuid[], %s::int[]) AS s(id, attempts)
                    ON CONFLICT (job_id) DO UPDATE
                   SET attempts = EXCLUDED.attempts, discarded_at = EXCLUDED.discarded_at,
                       discarded_by = EXCLUDED.discarded_by
                 WHERE scheduling_discardeddeadletter.attempts <> EXCLUDED.attempts
                """,
                [timezone.now(), discarded_by[:150], list(seen), list(seen.values())],
            )
            return cur.rowcount


def dead_letters_requeue(*, job_ids: Iterable[uuid.UUID | str]) -> int:
    """Requeue failed jobs with a fresh attempt budget; their attempt history stays. Only
    ``failed`` jobs are dead letters: anything else in ``job_ids`` is left alone."""
    return jobs_requeue(job_ids=job_ids, statuses=(JobStatus.FAILED,))
