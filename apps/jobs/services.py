"""Writes to the jobs ledger. Every other part changes jobs through these functions.

Claiming is a conditional UPDATE whose row count says who won (healthchecks' "another process got
there first"); no network I/O happens inside any transaction here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.jobs.lifecycle import plan_after_attempt
from apps.jobs.models import FINAL_STATUSES, Attempt, AttemptOutcome, Job, JobStatus
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
        with transaction.atomic():
            job.save(force_insert=True)
    except IntegrityError:
        if idempotency_key is None:
            raise
        existing = Job.objects.get(tenant_id=tenant_id, idempotency_key=idempotency_key)
        if existing.idempotency_fingerprint != idempotency_fingerprint:
            raise IdempotencyConflict(existing) from None
        return existing, False
    transaction.on_commit(_nudge_publisher)
    return job, True


def _nudge_publisher() -> None:
    """Ask the publisher to run now instead of at its next beat tick, so that a job normally
    starts within milliseconds. Best effort: beat runs it every second anyway."""
    from scrapejobs.celery import app  # noqa: PLC0415 - avoid importing Celery at model import

    try:
        # Coalesce a burst of submissions into one publisher run per 50 ms.
        if state_redis().set("sj:publish-nudge", "1", nx=True, px=50):
            app.send_task("apps.publishing.tasks.outbox_publish", queue="control")
    except Exception:  # noqa: BLE001 - the broker being down must not fail an accepted job
        logger.warning("publisher nudge failed; beat will publish", exc_info=True)


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
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            """
            UPDATE jobs_job
               SET status = 'running', attempts = attempts + 1, lease_owner = %s,
                   lease_expires_at = %s, started_at = COALESCE(started_at, %s), updated_at = %s
             WHERE id = %s AND status = 'queued' AND attempts < max_attempts
               AND (not_before IS NULL OR not_before <= %s)
               AND cancel_requested_at IS NULL
         RETURNING attempts, method, url, headers, body, timeout_s, max_attempts
            """,
            [worker, lease_until, now, now, str(job_id), now],
        )
        row = cur.fetchone()
        if row is None:
            return None
        attempt, method, url, headers, body, timeout_s, max_attempts = row
        cur.execute(
            "INSERT INTO jobs_attempt (job_id, number, worker, started_at) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (job_id, number) DO NOTHING",
            [str(job_id), attempt, worker, now],
        )
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
            _notify_final([str(job_id)])
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


def _notify_final(job_ids: Sequence[str]) -> None:
    """NOTIFY inside the transaction that made the jobs final: delivered only on commit."""
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
    applied: int = 0
    stale: int = 0


def attempts_apply_finished(receipts: Sequence[AttemptFinished]) -> ApplyStats:
    """Fold finished-attempt receipts into the ledger, in one transaction.

    The rule for replays and stale receipts (contract section 5, FR-W2 in REQUIREMENTS.md):
    - the attempt row is written only while it is still open (``finished_at IS NULL``), so a
      replay changes nothing;
    - the job moves only if it is still ``running`` with ``attempts`` equal to the receipt's
      attempt (the fencing token). A receipt for an older attempt, or for a job that is already
      final, leaves the job alone: the first final state wins.
    """
    stats = ApplyStats()
    finals: list[str] = []
    with transaction.atomic():
        for r in receipts:
            finished = _ts(r.finished_at)
            Attempt.objects.filter(job_id=r.job_id, number=r.attempt, finished_at__isnull=True).update(
                finished_at=finished,
                outcome=r.outcome,
                http_status=r.http_status,
                error_class=r.error_class,
                error=(r.error or None) and r.error[:2000],
                duration_ms=r.duration_ms,
            )
            job = (
                Job.objects.select_for_update()
                .filter(id=r.job_id, status=JobStatus.RUNNING, attempts=r.attempt)
                .only("id", "max_attempts", "cancel_requested_at")
                .first()
            )
            if job is None:
                stats.stale += 1
                continue
            nxt = plan_after_attempt(
                outcome=r.outcome,
                attempt=r.attempt,
                max_attempts=job.max_attempts,
                cancel_requested=job.cancel_requested_at is not None,
                retry_after_s=r.retry_after_s,
                now=finished,
                base=settings.SCRAPEJOBS_RETRY_BASE_S,
                cap=settings.SCRAPEJOBS_RETRY_CAP_S,
            )
            changes: dict[str, Any] = {
                "status": nxt.status,
                "lease_owner": None,
                "lease_expires_at": None,
                "last_error": _last_error(r),
            }
            if r.result is not None and nxt.status == JobStatus.SUCCEEDED:
                changes.update(
                    result_key=r.result.key,
                    result_size=r.result.size,
                    result_sha256=r.result.sha256,
                    result_content_type=r.result.content_type,
                    result_http_status=r.result.http_status,
                    result_stored_at=finished,
                )
            if nxt.status in FINAL_STATUSES:
                changes.update(finished_at=finished, final_published_at=None, not_before=None)
                finals.append(str(r.job_id))
            else:  # back to the queue: republish once not_before has passed
                changes.update(not_before=nxt.not_before, published_at=None)
            Job.objects.filter(id=r.job_id, status=JobStatus.RUNNING, attempts=r.attempt).update(**changes)
            stats.applied += 1
        _notify_final(finals)
    return stats


def _last_error(r: AttemptFinished) -> dict[str, Any] | None:
    if r.outcome == AttemptOutcome.SUCCEEDED:
        return None
    return {"class": r.error_class, "message": r.error, "http_status": r.http_status}
