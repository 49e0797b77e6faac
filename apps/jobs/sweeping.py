"""Sweeping the ledger (NFR-4): attempts lost with their worker,
and published jobs nobody took.

The sweeper never talks to the broker. It changes job rows and clears their publish mark, and
the outbox publisher sends them again: a state change and its "to publish" mark are one write,
the same guarantee intake has.

Both sweeps take rows in batches with ``FOR UPDATE SKIP LOCKED``, so two sweepers running at once
(two beat ticks overlapping, two control processes) split the work instead of waiting on each
other, and a row the writer is folding a receipt into right now is simply left for the next tick.
When to sweep, and how far back a lease counts as expired, is the scheduler's
(``apps.scheduling.services``).
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from apps.jobs.final_notices import jobs_notify_final
from apps.jobs.lifecycle import NextState, plan_after_attempt
from apps.jobs.models import FINAL_STATUSES, AttemptOutcome, JobStatus, counted_attempts
from apps.jobs.singleflight import LIVE_FETCH_SQL, jobs_fetch_settle

LEASE_EXPIRED = "lease_expired"
WORKER_STOPPED = "worker_stopped"
SWEEP_BATCH_SIZE = 500


@dataclass
class SweepStats:
    requeued: int = 0
    failed: int = 0
    cancelled: int = 0
    republished: int = 0
    kept: int = 0  # expired leases left running: the sweeper's ``keep`` said they are not lost
    final_ids: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.requeued + self.failed + self.cancelled


# Given the (job id, attempt) of running jobs whose lease expired, answers those that are not
# lost after all (the caller knows more than the lease: a receipt waiting, a live worker).
Keep = Callable[[list[tuple[str, int]]], set[tuple[str, int]]]


def jobs_lose_expired_leases(
    *,
    expired_for_s: float = 0.0,
    batch_size: int = SWEEP_BATCH_SIZE,
    rng: random.Random | None = None,
    keep: Keep | None = None,
) -> SweepStats:
    """Running jobs whose lease expired at least ``expired_for_s`` ago (their worker died or
    hangs) go back to ``queued``. Expired by the database's clock: leases are written on it too
    (``apps.jobs.claims``), so no host's clock takes part.

    The open attempt is closed as ``lost`` and the job follows the retry planner as for a
    temporary failure: back to ``queued`` after a backoff (``published_at`` cleared, so the
    publisher sends it again once ``not_before`` passes), ``failed`` when that was its last
    attempt, ``cancelled`` when a cancel was asked for while it ran. Runs batches until no expired
    lease is left.

    ``keep`` is asked about each batch, its rows locked, and the attempts it names stay
    ``running`` (counted in ``stats.kept``, and not asked about again in this sweep).
    """
    stats = SweepStats()
    kept: list[str] = []
    while True:
        taken = _lose_running_attempts(
            expired_for_s=expired_for_s,
            batch_size=batch_size,
            stats=stats,
            rng=rng,
            error_class=LEASE_EXPIRED,
            message="the lease expired before the worker reported; the worker is presumed dead",
            keep=keep,
            kept=kept,
        )
        if taken < batch_size:
            return stats


def jobs_release_held(
    *, job_ids: Iterable[uuid.UUID | str], lease_owner_prefix: str, rng: random.Random | None = None
) -> SweepStats:
    """A worker that is stopping and cannot finish in time gives its running jobs back at once,
    exactly as the sweeper would once their leases expired (the attempt is ``lost``, the job is
    requeued after a backoff), instead of leaving them ``running`` for up to a lease.

    Only jobs still leased by an owner starting with ``lease_owner_prefix`` (this worker) move:
    a job that another worker has taken since keeps running."""
    ids = [str(i) for i in job_ids]
    stats = SweepStats()
    if ids:
        _lose_running_attempts(
            batch_size=len(ids),
            stats=stats,
            rng=rng,
            error_class=WORKER_STOPPED,
            message="the worker was stopped before the attempt finished",
            job_ids=ids,
            lease_owner_prefix=lease_owner_prefix,
        )
    return stats


# SKIP LOCKED: a job row locked by another sweeper, a claim or the writer is not ours this tick.
# ``{which}`` says which running jobs (expired, or named and still ours), ``{spared}`` leaves out
# those ``keep`` already spared in this sweep.
_TAKE_RUNNING_SQL = """
    SELECT j.id, j.attempts, j.deferred_attempts, j.max_attempts,
           j.cancel_requested_at IS NOT NULL, j.lease_owner,
           a.id
      FROM jobs_job AS j
      LEFT JOIN jobs_attempt AS a ON a.job_id = j.id AND a.number = j.attempts
     WHERE j.status = 'running' AND {which} {spared}
     ORDER BY j.lease_expires_at
     LIMIT %s
       FOR UPDATE OF j SKIP LOCKED
    """

# Fenced on (running, attempt n, and still expired / still ours): the rows are locked, so this is
# belt and braces, but it keeps the rule where the write happens. A worker that tries to renew
# after this commit finds its attempt no longer running and stops; its late receipt is stale
# (apps.jobs.receipt_fold.attempts_apply_finished).
_MOVE_LOST_SQL = """
    UPDATE jobs_job AS j
       SET status = s.status, version = j.version + 1,
           not_before = CASE WHEN s.status = 'queued' THEN s.not_before END,
           published_at = NULL,
           lease_owner = NULL, lease_expires_at = NULL,
           last_error = %s::jsonb,
           finished_at = CASE WHEN s.status = 'queued' THEN NULL ELSE %s::timestamptz END,
           final_published_at = NULL,
           updated_at = %s
      FROM unnest(%s::uuid[], %s::int[], %s::text[], %s::timestamptz[])
           AS s(id, attempt, status, not_before)
     WHERE j.id = s.id AND j.status = 'running' AND j.attempts = s.attempt
       AND {which}
 RETURNING j.id, j.status, s.attempt
    """

# Close the open attempt as lost. The attempt row normally exists (job_claim writes it); if it
# does not, write it, so the history always shows the attempt that was lost.
_CLOSE_LOST_ATTEMPTS_SQL = """
    INSERT INTO jobs_attempt (job_id, number, worker, started_at, finished_at, outcome,
                              error_class, error, duration_ms)
    SELECT s.id, s.attempt, s.owner, %s, %s, %s, %s, %s, 0
      FROM unnest(%s::uuid[], %s::int[], %s::text[]) AS s(id, attempt, owner)
        ON CONFLICT (job_id, number) DO UPDATE
       SET finished_at = EXCLUDED.finished_at, outcome = EXCLUDED.outcome,
           error_class = EXCLUDED.error_class, error = EXCLUDED.error,
           duration_ms = GREATEST(0, (EXTRACT(EPOCH FROM (EXCLUDED.finished_at
                          - jobs_attempt.started_at)) * 1000)::int)
     WHERE jobs_attempt.finished_at IS NULL
    """

# A running job taken by the sweep: (job id, attempts, deferred attempts, max attempts,
# cancel requested, lease owner, open attempt's id or None).
_Row = tuple[Any, ...]


def _lose_running_attempts(
    *,
    batch_size: int,
    stats: SweepStats,
    rng: random.Random | None,
    error_class: str,
    message: str,
    job_ids: list[str] | None = None,
    lease_owner_prefix: str | None = None,
    expired_for_s: float = 0.0,
    keep: Keep | None = None,
    kept: list[str] | None = None,
) -> int:
    """Close the open attempt of running jobs as ``lost`` and move each job on as the retry
    planner says. Without ``job_ids``: jobs whose lease expired at least ``expired_for_s`` ago.
    With them: those jobs, if ``lease_owner_prefix`` still holds their lease. Every time is the
    database's: the transaction's ``now()``."""
    if job_ids is None:
        # Uses the partial index jobs_running_by_lease.
        which = "j.lease_expires_at < now() - make_interval(secs => %s)"
        which_params: list[Any] = [float(expired_for_s)]
    else:
        which = "j.id = ANY(%s::uuid[]) AND starts_with(j.lease_owner, %s)"
        which_params = [job_ids, lease_owner_prefix or ""]
    with transaction.atomic(), connection.cursor() as cur:
        # The database's clock for the retry times and the attempt's end written below; now() is
        # the same instant in every statement of this transaction.
        cur.execute("SELECT now()")
        now: datetime = cur.fetchone()[0]
        rows = _take_running(cur, which=which, which_params=which_params, kept=kept, batch_size=batch_size)
        taken = len(rows)
        if keep is not None and rows:
            rows = _spare_kept(rows, keep=keep, stats=stats, kept=kept)
        if not rows:
            return taken
        plans = [(row, _plan_lost(row, now=now, rng=rng)) for row in rows]
        moved = _write_lost(
            cur,
            plans=plans,
            now=now,
            which=which,
            which_params=which_params,
            error_class=error_class,
            message=message,
        )
        finals = [str(i) for i, status, _ in moved if status in FINAL_STATUSES]
        jobs_notify_final(finals)  # inside this transaction: heard only once it commits
        # A lost attempt that was fetching for others hands the fetch over to one of them.
        jobs_fetch_settle([str(i) for i, _, _ in moved])
        _count_moved(stats, moved=moved, finals=finals)
        return taken


def _write_lost(
    cur: Any,
    *,
    plans: list[tuple[_Row, NextState]],
    now: datetime,
    which: str,
    which_params: list[Any],
    error_class: str,
    message: str,
) -> list[tuple[Any, str, int]]:
    """Move each planned job on and close its attempt as lost: the jobs moved, as (id, new
    status, attempt number)."""
    last_error = json.dumps({"class": error_class, "message": message, "http_status": None})
    cur.execute(
        _MOVE_LOST_SQL.format(which=which),
        [
            last_error,
            now,
            now,
            [str(r[0]) for r, _ in plans],
            [r[1] for r, _ in plans],
            [str(nxt.status) for _, nxt in plans],
            [nxt.not_before for _, nxt in plans],
            *which_params,
        ],
    )
    moved = cur.fetchall()
    owner_of = {str(r[0]): r[5] or "" for r, _ in plans}
    cur.execute(
        _CLOSE_LOST_ATTEMPTS_SQL,
        [
            now,
            now,
            AttemptOutcome.LOST.value,
            error_class,
            message,
            [str(i) for i, _, _ in moved],
            [n for _, _, n in moved],
            [owner_of[str(i)] for i, _, _ in moved],
        ],
    )
    return moved


def _take_running(
    cur: Any, *, which: str, which_params: list[Any], kept: list[str] | None, batch_size: int
) -> list[_Row]:
    """Lock a batch of the running jobs ``which`` names, with their open attempts."""
    # Jobs ``keep`` already spared in this sweep are not taken (and asked about) again.
    spared, spared_params = ("AND j.id <> ALL(%s::uuid[])", [kept]) if kept else ("", [])
    cur.execute(
        _TAKE_RUNNING_SQL.format(which=which, spared=spared), [*which_params, *spared_params, batch_size]
    )
    rows = cur.fetchall()
    # The writer folding this very attempt's receipt locks the attempt row first, then the job
    # row. Taking the attempt rows with SKIP LOCKED too leaves such a job to the writer (its
    # receipt decides) instead of deadlocking with it or overruling its outcome.
    attempt_ids = [r[6] for r in rows if r[6] is not None]
    if attempt_ids:
        cur.execute("SELECT id FROM jobs_attempt WHERE id = ANY(%s) FOR UPDATE SKIP LOCKED", [attempt_ids])
        locked = {r[0] for r in cur.fetchall()}
        rows = [r for r in rows if r[6] is None or r[6] in locked]
    return rows


def _spare_kept(rows: list[_Row], *, keep: Keep, stats: SweepStats, kept: list[str] | None) -> list[_Row]:
    """The rows ``keep`` does not vouch for; those it does stay running, counted in ``stats``."""
    alive = keep([(str(r[0]), r[1]) for r in rows])
    if not alive:
        return rows
    spare = [r for r in rows if (str(r[0]), r[1]) in alive]
    stats.kept += len(spare)
    if kept is not None:
        kept.extend(str(r[0]) for r in spare)
    return [r for r in rows if (str(r[0]), r[1]) not in alive]


def _plan_lost(row: _Row, *, now: datetime, rng: random.Random | None) -> NextState:
    """Where a job whose attempt was lost goes next.

    A lost attempt counts as a temporary failure: retried after a backoff, or failed when it was
    the last one. It spends an attempt, so a job that kills its workers (a body that exhausts
    memory, say) cannot loop forever."""
    _job_id, attempt, deferred, max_attempts, cancel_requested, _owner, _attempt_id = row
    return plan_after_attempt(
        outcome=AttemptOutcome.LOST,
        attempt=counted_attempts(attempts=attempt, deferred_attempts=deferred),
        max_attempts=max_attempts,
        cancel_requested=cancel_requested,
        retry_after_s=None,
        now=now,
        base=settings.SCRAPEJOBS_RETRY_BASE_S,
        cap=settings.SCRAPEJOBS_RETRY_CAP_S,
        rng=rng,
    )


def _count_moved(stats: SweepStats, *, moved: list[tuple[Any, str, int]], finals: list[str]) -> None:
    for _, status, _ in moved:
        if status == JobStatus.QUEUED:
            stats.requeued += 1
        elif status == JobStatus.FAILED:
            stats.failed += 1
        elif status == JobStatus.CANCELLED:
            stats.cancelled += 1
    stats.final_ids.extend(finals)


def jobs_sweep_unclaimed(*, older_than_s: float | None = None, batch_size: int = SWEEP_BATCH_SIZE) -> int:
    """Queued jobs that were published but not taken within ``SCRAPEJOBS_REPUBLISH_AFTER_S`` get
    their publish mark cleared, so the publisher sends them again: a broker that lost its
    messages (restart without persistence, FLUSHDB, a deleted queue) loses no job.

    A job whose first message is merely waiting behind a backlog gets a second message; the
    claim is a conditional UPDATE, so the duplicate is a no-op. Keep the bound well above the
    normal time to first attempt. Returns the number of jobs marked for republishing.

    The age is measured on the database's clock, which stamped ``published_at``
    (``apps.jobs.outbox.outbox_published_stamp``).

    A job parked behind another job's fetch of its key (``fetch_parked_at``) holds no message on
    purpose and is left alone while that fetch is to come or running (FR-15): the settling of the
    fetch serves it or hands the fetch to it. Only a parked job whose key has no live fetch (a
    repair: nothing should leave one) is unparked and sent again, to decide afresh.
    """
    older = float(older_than_s or settings.SCRAPEJOBS_REPUBLISH_AFTER_S)
    total = 0
    while True:
        with connection.cursor() as cur:
            # Uses the partial index jobs_published_untaken. One statement, so one short
            # transaction per batch; SKIP LOCKED leaves rows being claimed right now alone.
            cur.execute(
                f"""
                UPDATE jobs_job
                   SET published_at = NULL, fetch_parked_at = NULL, updated_at = now(),
                       version = version + 1
                 WHERE id IN (SELECT j.id FROM jobs_job AS j
                               WHERE j.status = 'queued' AND j.published_at IS NOT NULL
                                 AND j.published_at < now() - make_interval(secs => %(older)s)
                                 AND (j.fetch_parked_at IS NULL OR NOT EXISTS (
                                      SELECT 1 FROM jobs_inflightfetch AS f JOIN jobs_job AS h
                                          ON h.id = f.job_id
                                       WHERE f.key = j.fetch_key AND {LIVE_FETCH_SQL}))
                               ORDER BY j.published_at
                               LIMIT %(limit)s
                                 FOR UPDATE OF j SKIP LOCKED)
                   AND status = 'queued' AND published_at < now() - make_interval(secs => %(older)s)
                """,
                {"older": older, "limit": batch_size},
            )
            n = cur.rowcount
        total += n
        if n < batch_size:
            return total
