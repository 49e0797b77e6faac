"""Intake's write: a new job is one INSERT with an empty ``published_at`` (the outbox that
NFR-3 rests on: a job is published after it commits), idempotent per tenant (NFR-7), and a nudge to the publisher once it commits."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from apps.jobs.inserts import job_insert
from apps.jobs.models import Job
from apps.jobs.nudges import PUBLISH, BackgroundNudge, nudges_send
from apps.tracing import traceparent_current


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
    render: str = "none",
    browser_options: dict[str, Any] | None = None,
    revalidate: bool = False,
    callback_on: str | None = None,
    idempotency_key: str | None = None,
    idempotency_fingerprint: str | None = None,
) -> tuple[Job, bool]:
    """Intake: one INSERT with an empty ``published_at`` (the outbox, NFR-1).

    Returns ``(job, created)``. With an idempotency key already used by this tenant, returns the
    existing job and ``created=False``, or raises ``IdempotencyConflict`` when the body differs.
    Concurrent retries with one key: the unique index makes the second INSERT wait for the first
    to commit, then fail, and the loser reads the winner's row, so exactly one job exists.

    Keys expire (``SCRAPEJOBS_IDEMPOTENCY_TTL_HOURS``): a key held by a job created longer ago
    than that is taken off the old job and given to a new one. The unique index stays on
    (tenant, key) for the keys still held, so a new key (and a replay) costs what it always did,
    one INSERT (one more read for a replay); only reusing an expired key costs a release and a
    second INSERT. A time-bucketed uniqueness would also keep one INSERT, but a key used just
    before a bucket's end would stop replaying just after it, well before the TTL.
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
        render=render,
        browser_options=browser_options,
        # FR-33, FR-34: null unless asked, so a plain job's row carries nothing more.
        revalidate=True if revalidate else None,
        callback_on=callback_on if callback_on == "change" else None,
        idempotency_key=idempotency_key,
        idempotency_fingerprint=idempotency_fingerprint,
        created_at=timezone.now(),
        # The request's span (FR-29): the job's later steps are spans of its trace. None when
        # tracing is off, and the INSERT then leaves the column out.
        trace_context=traceparent_current(),
    )
    return _job_insert_idempotent(job, key=idempotency_key, fingerprint=idempotency_fingerprint)


def _job_insert_idempotent(job: Job, *, key: str | None, fingerprint: str | None) -> tuple[Job, bool]:
    """Insert ``job`` unless its tenant's idempotency ``key`` already holds a job (see
    ``job_create``); the publisher is nudged once a new job commits."""
    # Normally one pass: one INSERT. A key that is taken sends us round again only when the
    # job holding it is older than the TTL (its key is released first) or when the clean-up
    # released it between our INSERT and our read.
    for last in (False, False, True):
        try:
            if connection.in_atomic_block:
                # Inside the caller's transaction: a savepoint, so a duplicate key does not break it.
                with transaction.atomic():
                    job_insert(job)
            else:
                # Autocommit: the INSERT is its own transaction, one round trip (no BEGIN/COMMIT).
                job_insert(job)
        except IntegrityError:
            # Raised on the third pass too: the key would have changed hands three times within
            # one request, which only a burst of concurrent reuses of an expired key can do.
            if key is None or last:
                raise
            existing = Job.objects.filter(tenant_id=job.tenant_id, idempotency_key=key).first()
            if existing is None:
                continue  # released by the clean-up since our INSERT: try again
            if existing.created_at < job.created_at - idempotency_ttl():
                _idempotency_key_release(job_id=existing.id, key=key)
                continue
            if existing.idempotency_fingerprint != fingerprint:
                raise IdempotencyConflict(existing) from None
            return existing, False
        break
    transaction.on_commit(publisher_nudge)
    return job, True


def idempotency_ttl() -> timedelta:
    """How long an Idempotency-Key replays its job (``SCRAPEJOBS_IDEMPOTENCY_TTL_HOURS``, at
    least 24 h: NFR-7 keeps keys at least that long)."""
    return timedelta(hours=settings.SCRAPEJOBS_IDEMPOTENCY_TTL_HOURS)


def _idempotency_key_release(*, job_id: uuid.UUID, key: str) -> None:
    """Take an expired key off its job (the job stays as it is), so a new job can take it.
    Conditional on the key: two requests releasing it at once change it once."""
    Job.objects.filter(id=job_id, idempotency_key=key).update(
        idempotency_key=None, idempotency_fingerprint=None, version=F("version") + 1
    )


def idempotency_keys_expire(*, batch_size: int = 1000) -> int:
    """Release every key older than the TTL (periodic clean-up, run by beat through
    ``apps.scheduling.tasks``); returns how many. ``job_create`` never replays an expired key
    even before this runs: the clean-up only keeps the unique index (and the partial index it
    walks, ``jobs_idempotency_by_created``) to the keys that can still replay."""
    cutoff = timezone.now() - idempotency_ttl()
    total = 0
    while True:
        with connection.cursor() as cur:
            # Uses jobs_idempotency_by_created. SKIP LOCKED: a row the writer or a claim holds
            # right now is released at the next run.
            cur.execute(
                """
                UPDATE jobs_job SET idempotency_key = NULL, idempotency_fingerprint = NULL,
                       version = version + 1
                 WHERE id IN (SELECT id FROM jobs_job
                               WHERE idempotency_key IS NOT NULL AND created_at < %s
                               ORDER BY created_at
                               LIMIT %s
                                 FOR UPDATE SKIP LOCKED)
                """,
                [cutoff, batch_size],
            )
            n = cur.rowcount
        total += n
        if n < batch_size:
            return total


def publisher_nudge() -> None:
    """Ask the publisher to run now instead of at its next beat tick, so that a job normally
    starts within milliseconds. Best effort and never blocking: the Redis call happens on a
    background thread (apps.jobs.nudges), so a slow or absent Redis delays no request and fails
    none; beat runs the publisher every SCRAPEJOBS_PUBLISH_INTERVAL_S anyway."""
    _publisher_nudges.ask()


# One thread per process; asks within 50 ms fold into one nudge (the control process's listener
# spaces its runs SCRAPEJOBS_NUDGE_GAP_S apart).
_publisher_nudges = BackgroundNudge(lambda: nudges_send(PUBLISH), name="publisher nudge", min_interval_s=0.05)


def jobs_create_grouped(
    *, tenant_id: uuid.UUID, group_id: uuid.UUID, rows: list[tuple[int, str, str]], options: dict[str, Any]
) -> list[uuid.UUID]:
    """Jobs of a group other than a batch (a crawl's pages, FR-40): ``rows`` of (row number, url,
    domain), each job keyed as a batch's row is (``batch_id`` = ``group_id``, ``batch_row`` = the
    row number) and given the same ``options`` (POST /jobs's fields, already validated). One
    multi-row INSERT of ordinary outbox rows, inside the caller's transaction; the publisher is
    nudged once it commits. Returns the new jobs' ids in the order of ``rows``."""
    if not rows:
        return []
    now = timezone.now()
    max_attempts = int(options.get("max_attempts", 5))
    jobs = [
        Job(
            tenant_id=tenant_id,
            url=url,
            domain=domain,
            method="GET",
            headers=dict(options.get("headers") or {}),
            priority=options.get("priority", "normal"),
            max_attempts=max_attempts,
            attempt_budget=max_attempts,
            timeout_s=int(options.get("timeout_s", 30)),
            max_age_s=int(options.get("max_age_s", 0)),
            render=options.get("render", "none"),
            browser_options=options.get("browser_options"),
            # FR-33: a crawl run again revalidates its pages (stored as POST /jobs stores it).
            revalidate=True if options.get("revalidate") else None,
            created_at=now,
            batch_id=group_id,
            batch_row=row,
        )
        for row, url, domain in rows
    ]
    Job.objects.bulk_create(jobs)
    transaction.on_commit(publisher_nudge)
    return [job.id for job in jobs]
