"""Writes to the jobs ledger. Every other part changes jobs through these functions.

Claiming is a conditional UPDATE whose row count says who won (healthchecks' "another process got
there first"); no network I/O happens inside any transaction here.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.jobs.inserts import job_insert
from apps.jobs.lifecycle import plan_after_attempt
from apps.jobs.models import FINAL_STATUSES, AttemptOutcome, Job, JobStatus
from apps.jobs.nudges import BackgroundNudge
from apps.jobs.receipts import AttemptFinished
from apps.jobs.redis import cancel_flag_key, state_redis

logger = logging.getLogger(__name__)

# Channel for "this job reached a final state" (payload: job id); ?wait= listens on it.
JOB_FINAL_CHANNEL = "scrapejobs_job_final"


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before with a different request body."""

    def __init__(self, job: Job):
        super().__init__("idempotency key reused with a different request")
        self.job = job


def job_create(
    *,
    tenant_id: uuid.UUID,
    url: str,
    domain: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: str | None = None,
    priority: str = "normal",
    callback_url: str | None = None,
    max_attempts: int = 5,
    timeout_s: int = 30,
    max_age_s: int = 0,
    idempotency_key: str | None = None,
    idempotency_fingerprint: str | None = None,
) -> tuple[Job, bool]:
    """Intake: one INSERT with an empty ``published_at`` (the outbox, contract 3.2).

    Returns ``(job, created)``. With an idempotency key already used by this tenant, returns the
    existing job and ``created=False``, or raises ``IdempotencyConflict`` when the body differs.
    Concurrent retries with one key: the unique index makes the second INSERT wait for the first
    to commit, then fail, and the loser reads the winner's row, so exactly one job exists.
    """
    job = Job(
        tenant_id=tenant_id,
        url=url,
        domain=domain,
        method=method,
        headers=headers or {},
        body=body,
        priority=priority,
        callback_url=callback_url,
        max_attempts=max_attempts,
        attempt_budget=max_attempts,
        timeout_s=timeout_s,
        max_age_s=max_age_s,
        idempotency_key=idempotency_key,
        idempotency_fingerprint=idempotency_fingerprint,
        created_at=timezone.now(),
    )
    try:
        if connection.in_atomic_block:
            # Inside the caller's transaction: a savepoint, so a duplicate key does not break it.
            with transaction.atomic():
                job_insert(job)
        else:
            # Autocommit: the INSERT is its own transaction, one round trip (no BEGIN/COMMIT).
            job_insert(job)
    except IntegrityError:
        if idempotency_key is None:
            raise
        existing = Job.objects.get(tenant_id=tenant_id, idempotency_key=idempotency_key)
        if existing.idempotency_fingerprint != idempotency_fingerprint:
            raise IdempotencyConflict(existing) from None
        return existing, False
    transaction.on_commit(publisher_nudge)
    return job, True


def publisher_nudge() -> None:
    """Ask the publisher to run now instead of at its next beat tick, so that a job normally
    starts within milliseconds. Best effort and never blocking: the Redis and broker calls happen
    on a background thread (apps.jobs.nudges), so a slow or absent Redis delays no request and
    fails none; beat runs the publisher every SCRAPEJOBS_PUBLISH_INTERVAL_S anyway."""
    _publisher_nudges.ask()


def _publisher_nudge_send() -> None:
    from scrapejobs.celery import app  # noqa: PLC0415 - avoid importing Celery at model import

    # Coalesce a burst of submissions from every process into one publisher run per 50 ms (each
    # process already sends at most one per 50 ms).
    if state_redis().set("sj:publish-nudge", "1", nx=True, px=50):
        app.send_task("apps.publishing.tasks.outbox_publish", queue="control")


_publisher_nudges = BackgroundNudge(_publisher_nudge_send, name="publisher nudge", min_interval_s=0.05)


@dataclass(frozen=True)
class ClaimedJob:
    id: uuid.UUID
    attempt: int
    method: str
    url: str
    headers: dict[str, str]
    body: str | None
    timeout_s: int
    max_attempts: int
    lease_expires_at: datetime
    result_key: str | None = None


def job_claim(*, job_id: uuid.UUID | str, worker: str) -> ClaimedJob | None:
    """Take a queued job: ``queued → running``, attempt + 1, a lease, and the attempt's row.

    Returns None when the job is not ours to run (already taken, final, cancelled, or waiting for
    its retry time): a duplicate broker message is a no-op.
    """
    now = timezone.now()
    lease_until = now + timedelta(seconds=settings.SCRAPEJOBS_LEASE_SECONDS)
    # One statement, so one round trip and atomic without BEGIN/COMMIT: the conditional UPDATE
    # decides who owns the job, and the attempt's row is written only for the winner.
    with connection.cursor() as cur:
        cur.execute(
            """
            WITH claimed AS (
                UPDATE jobs_job
                   SET status = 'running', attempts = attempts + 1, lease_owner = %s,
                       lease_expires_at = %s, started_at = COALESCE(started_at, %s), updated_at = %s
                 WHERE id = %s AND status = 'queued' AND attempts < max_attempts
                   AND (not_before IS NULL OR not_before <= %s)
                   AND cancel_requested_at IS NULL
             RETURNING id, attempts, method, url, headers, body, timeout_s, max_attempts
            ), attempt AS (
                INSERT INTO jobs_attempt (job_id, number, worker, started_at)
                SELECT id, attempts, %s, %s FROM claimed
                ON CONFLICT (job_id, number) DO NOTHING
            )
            SELECT attempts, method, url, headers, body, timeout_s, max_attempts FROM claimed
            """,
            [worker, lease_until, now, now, str(job_id), now, worker, now],
        )
        row = cur.fetchone()
    if row is None:
        return None
    attempt, method, url, headers, body, timeout_s, max_attempts = row
    if isinstance(headers, str):  # raw cursor: psycopg may hand jsonb back decoded or not
        import json  # noqa: PLC0415

        headers = json.loads(headers)
    return ClaimedJob(
        id=uuid.UUID(str(job_id)),
        attempt=attempt,
        method=method,
        url=url,
        headers=headers or {},
        body=body,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        lease_expires_at=lease_until,
    )


def job_renew_lease(*, job_id: uuid.UUID | str, attempt: int, worker: str) -> bool:
    """Heartbeat. Fenced by the attempt number: a worker whose lease expired and whose job was
    taken again (a newer attempt) gets False and must stop."""
    until = timezone.now() + timedelta(seconds=settings.SCRAPEJOBS_LEASE_SECONDS)
    return (
        Job.objects.filter(id=job_id, status=JobStatus.RUNNING, attempts=attempt, lease_owner=worker).update(
            lease_expires_at=until
        )
        == 1
    )


def job_cancel(*, job_id: uuid.UUID | str, tenant_id: uuid.UUID | None = None) -> str:
    """Cancel a job. Returns ``"cancelled"`` (it was queued and is now final),
    ``"cancel_requested"`` (it is running; its worker stops at its next check), or ``"final"``
    (nothing to cancel)."""
    now = timezone.now()
    scope = Q(id=job_id) if tenant_id is None else Q(id=job_id, tenant_id=tenant_id)
    with transaction.atomic():
        cancelled = Job.objects.filter(scope, status=JobStatus.QUEUED).update(
            status=JobStatus.CANCELLED,
            finished_at=now,
            cancel_requested_at=now,
            lease_owner=None,
            lease_expires_at=None,
            final_published_at=None,
        )
        if cancelled:
            jobs_notify_final([str(job_id)])
            return "cancelled"
        requested = Job.objects.filter(scope, status=JobStatus.RUNNING).update(cancel_requested_at=now)
    if requested:
        # The worker polls this flag between chunks; Redis, so the hot loop never queries SQL.
        state_redis().set(cancel_flag_key(str(job_id)), "1", ex=24 * 3600)
        return "cancel_requested"
    return "final"


def jobs_requeue(*, job_ids: Iterable[uuid.UUID | str]) -> int:
    """Give failed or cancelled jobs a fresh attempt budget; their history stays.

    The attempt budget restarts by raising ``max_attempts`` above the attempts already made, so
    attempt numbers keep growing and the natural key of every old attempt stays unique."""
    ids = [str(i) for i in job_ids]
    if not ids:
        return 0
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE jobs_job
               SET status = 'queued',
                   max_attempts = attempts + attempt_budget,
                   not_before = NULL, published_at = NULL, finished_at = NULL,
                   cancel_requested_at = NULL, lease_owner = NULL, lease_expires_at = NULL,
                   last_error = NULL, final_published_at = NULL, updated_at = now()
             WHERE id = ANY(%s::uuid[]) AND status IN ('failed', 'cancelled')
            """,
            [ids],
        )
        return cur.rowcount


def jobs_notify_final(job_ids: Sequence[str]) -> None:
    """Tell ``?wait=`` listeners that these jobs are final: call it inside the transaction that
    made them final, so the NOTIFY is delivered only on commit. The writer's batch fold sends the
    same notification from its own multi-row statement."""
    if not job_ids:
        return
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_notify(%s, x) FROM unnest(%s::text[]) AS x", [JOB_FINAL_CHANNEL, list(job_ids)]
        )


def _ts(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, tz=UTC)


@dataclass
class ApplyStats:
    applied: int = 0  # receipts that moved their job
    stale: int = 0  # receipts that moved nothing (duplicates, older attempts, final jobs)


def attempts_apply_finished(
    receipts: Sequence[AttemptFinished], *, timeout_s: float | None = None
) -> ApplyStats:
    """Fold finished-attempt receipts into the ledger, in one transaction of four statements
    whatever the number of receipts (the leased writer calls it once per batch).

    The rule for replays and stale receipts (contract section 5, FR-W2 in REQUIREMENTS.md):
    - receipts are keyed by ``(job_id, attempt)``; within one call the first receipt of a key
      wins and later ones are ignored;
    - the attempt row is written only while it is still open (``finished_at IS NULL``), so a
      replay changes nothing;
    - the job moves only if it is still ``running`` with ``attempts`` equal to the receipt's
      attempt (the fencing token). A receipt for an older attempt, or for a job that is already
      final, leaves the job alone: the first final state wins.

    ``timeout_s`` bounds the transaction (statement and idle-in-transaction timeouts, SET LOCAL).
    """
    unique: dict[tuple[str, int], AttemptFinished] = {}
    for r in receipts:
        unique.setdefault((str(r.job_id), int(r.attempt)), r)
    batch = list(unique.values())
    stats = ApplyStats()
    if not batch:
        return stats
    with transaction.atomic():
        connection.ensure_connection()
        # A plain psycopg cursor binds parameters server-side; Django's cursor binds them
        # client-side, quoting every array element in Python (more costly than the statements).
        cur = psycopg.Cursor(connection.connection)
        # Pipeline mode: the first three statements go in one round trip, the job UPDATE (with
        # its NOTIFY) in a second one, then COMMIT. The three big statements are prepared on
        # their connection (prepare=True; Django leaves automatic preparing off): planning them
        # was about a fifth of the database's CPU per receipt. This needs a direct connection or
        # a pooler that keeps prepared statements (PgBouncer 1.21+ with max_prepared_statements).
        with connection.connection.pipeline():
            if timeout_s is not None:
                ms = str(max(1, int(timeout_s * 1000)))
                cur.execute(
                    "SELECT set_config('statement_timeout', %s, true),"
                    " set_config('idle_in_transaction_session_timeout', %s, true)",
                    [ms, ms],
                )
            _attempts_close(cur, batch)
            # Lock the batch's running jobs in id order (claims and cancels lock single rows, so
            # a consistent order here is all that keeps two batches from deadlocking).
            cur.execute(
                "SELECT id::text, attempts, max_attempts, cancel_requested_at IS NOT NULL FROM jobs_job"
                " WHERE id = ANY(%b::uuid[]) AND status = 'running' ORDER BY id FOR UPDATE",
                [sorted({r.job_id for r in batch})],
                prepare=True,
            )
            running = {row[0]: row[1:] for row in cur.fetchall()}
        moves = [
            _job_move(r, max_attempts=row[1], cancel_requested=row[2])
            for r in batch
            if (row := running.get(str(r.job_id))) is not None and row[0] == r.attempt
        ]
        _jobs_move(cur, moves)
        cur.close()
        stats.applied = len(moves)
        stats.stale = len(receipts) - stats.applied
    return stats


def _attempts_close(cur: Any, batch: Sequence[AttemptFinished]) -> None:
    """Close the batch's attempt rows: one multi-row UPDATE, open rows only (replays no-op)."""
    cur.execute(
        """
        UPDATE jobs_attempt AS a
           SET finished_at = v.finished_at, outcome = v.outcome, http_status = v.http_status,
               error_class = v.error_class, error = v.error, duration_ms = v.duration_ms
          FROM unnest(%b::uuid[], %b::int[], %b::timestamptz[], %b::text[], %b::int[], %b::text[],
                      %b::text[], %b::bigint[])
               AS v(job_id, number, finished_at, outcome, http_status, error_class, error, duration_ms)
         WHERE a.job_id = v.job_id AND a.number = v.number AND a.finished_at IS NULL
        """,
        [
            [str(r.job_id) for r in batch],
            [r.attempt for r in batch],
            [_ts(r.finished_at) for r in batch],
            [r.outcome for r in batch],
            [r.http_status for r in batch],
            [r.error_class for r in batch],
            [(r.error or None) and r.error[:2000] for r in batch],
            [r.duration_ms for r in batch],
        ],
        prepare=True,
    )


@dataclass(frozen=True)
class _Move:
    receipt: AttemptFinished
    status: str
    final: bool
    not_before: datetime | None
    last_error: str | None  # JSON text


def _job_move(r: AttemptFinished, *, max_attempts: int, cancel_requested: bool) -> _Move:
    finished = _ts(r.finished_at)
    nxt = plan_after_attempt(
        outcome=r.outcome,
        attempt=r.attempt,
        max_attempts=max_attempts,
        cancel_requested=cancel_requested,
        retry_after_s=r.retry_after_s,
        now=finished,
        base=settings.SCRAPEJOBS_RETRY_BASE_S,
        cap=settings.SCRAPEJOBS_RETRY_CAP_S,
    )
    final = nxt.status in FINAL_STATUSES
    err = _last_error(r)
    return _Move(
        receipt=r,
        status=nxt.status,
        final=final,
        # Final: no retry wait. Back to the queue: republished once not_before has passed.
        not_before=None if final else nxt.not_before,
        last_error=None if err is None else json.dumps(err),
    )


def _jobs_move(cur: Any, moves: Sequence[_Move]) -> list[str]:
    """Apply the planned moves in one multi-row UPDATE, fenced again by status and attempt, and
    NOTIFY (delivered on commit) the jobs that became final; returns their ids."""
    if not moves:
        return []

    def result(m: _Move, attr: str) -> Any:
        r = m.receipt.result
        return getattr(r, attr) if r is not None and m.status == JobStatus.SUCCEEDED else None

    cur.execute(
        """
        WITH moved AS (
        UPDATE jobs_job AS j
           SET status = v.status, lease_owner = NULL, lease_expires_at = NULL,
               last_error = v.last_error::jsonb,
               result_key = CASE WHEN v.has_result THEN v.result_key ELSE j.result_key END,
               result_size = CASE WHEN v.has_result THEN v.result_size ELSE j.result_size END,
               result_sha256 = CASE WHEN v.has_result THEN v.result_sha256 ELSE j.result_sha256 END,
               result_content_type = CASE WHEN v.has_result THEN v.result_content_type
                                          ELSE j.result_content_type END,
               result_http_status = CASE WHEN v.has_result THEN v.result_http_status
                                         ELSE j.result_http_status END,
               result_stored_at = CASE WHEN v.has_result THEN v.finished_at ELSE j.result_stored_at END,
               finished_at = CASE WHEN v.final THEN v.finished_at ELSE j.finished_at END,
               final_published_at = CASE WHEN v.final THEN NULL ELSE j.final_published_at END,
               published_at = CASE WHEN v.final THEN j.published_at ELSE NULL END,
               not_before = v.not_before,
               updated_at = now()
          FROM unnest(%b::uuid[], %b::int[], %b::text[], %b::bool[], %b::timestamptz[], %b::text[],
                      %b::timestamptz[], %b::bool[], %b::text[], %b::bigint[], %b::text[], %b::text[],
                      %b::int[])
               AS v(id, attempt, status, final, not_before, last_error, finished_at, has_result,
                    result_key, result_size, result_sha256, result_content_type, result_http_status)
         WHERE j.id = v.id AND j.status = 'running' AND j.attempts = v.attempt
     RETURNING j.id::text AS id, v.final AS final
        )
        SELECT id, final, CASE WHEN final THEN pg_notify(%b, id) END FROM moved
        """,
        [
            [str(m.receipt.job_id) for m in moves],
            [m.receipt.attempt for m in moves],
            [str(m.status) for m in moves],
            [m.final for m in moves],
            [m.not_before for m in moves],
            [m.last_error for m in moves],
            [_ts(m.receipt.finished_at) for m in moves],
            [result(m, "key") is not None for m in moves],
            [result(m, "key") for m in moves],
            [result(m, "size") for m in moves],
            [result(m, "sha256") for m in moves],
            [result(m, "content_type") for m in moves],
            [result(m, "http_status") for m in moves],
            JOB_FINAL_CHANNEL,
        ],
        prepare=True,
    )
    return [job_id for job_id, final, _ in cur.fetchall() if final]


def _last_error(r: AttemptFinished) -> dict[str, Any] | None:
    if r.outcome == AttemptOutcome.SUCCEEDED:
        return None
    return {"class": r.error_class, "message": r.error, "http_status": r.http_status}
