"""Intake's write: a new job is one INSERT with an empty ``published_at`` (the outbox, contract
3.2), idempotent per tenant, and a nudge to the publisher once it commits."""

from __future__ import annotations

import uuid

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from apps.jobs.inserts import job_insert
from apps.jobs.models import Job
from apps.jobs.nudges import PUBLISH, BackgroundNudge, nudges_send


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
    starts within milliseconds. Best effort and never blocking: the Redis call happens on a
    background thread (apps.jobs.nudges), so a slow or absent Redis delays no request and fails
    none; beat runs the publisher every SCRAPEJOBS_PUBLISH_INTERVAL_S anyway."""
    _publisher_nudges.ask()


# One thread per process; asks within 50 ms fold into one nudge (the control process's listener
# spaces its runs 50 ms apart too).
_publisher_nudges = BackgroundNudge(lambda: nudges_send(PUBLISH), name="publisher nudge", min_interval_s=0.05)
