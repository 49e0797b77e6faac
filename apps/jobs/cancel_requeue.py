"""Cancel a job (the API and the admin) and requeue failed or cancelled ones (the admin, the dead
letters)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.jobs.final_notices import jobs_notify_final
from apps.jobs.models import Job, JobStatus
from apps.jobs.redis import cancel_flag_key, state_redis

# What a requeue takes by default: the final states that are not a success.
REQUEUABLE = (JobStatus.FAILED, JobStatus.CANCELLED)


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


def jobs_requeue(*, job_ids: Iterable[uuid.UUID | str], statuses: Iterable[str] = REQUEUABLE) -> int:
    """Give failed or cancelled jobs (those of ``job_ids`` in one of ``statuses``) a fresh attempt
    budget; their history stays. Returns how many were requeued.

    The attempt budget restarts by raising ``max_attempts`` above the attempts already made, so
    attempt numbers keep growing and the natural key of every old attempt stays unique."""
    ids = [str(i) for i in job_ids]
    allowed = [str(s) for s in statuses]
    if not ids:
        return 0
    if not set(allowed) <= set(REQUEUABLE):
        raise ValueError(f"only {', '.join(REQUEUABLE)} jobs can be requeued, not {allowed}")
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE jobs_job
               SET status = 'queued',
                   max_attempts = attempts + attempt_budget,
                   not_before = NULL, published_at = NULL, finished_at = NULL,
                   cancel_requested_at = NULL, lease_owner = NULL, lease_expires_at = NULL,
                   last_error = NULL, final_published_at = NULL, updated_at = now()
             WHERE id = ANY(%s::uuid[]) AND status = ANY(%s::text[])
            """,
            [ids, allowed],
        )
        return cur.rowcount
