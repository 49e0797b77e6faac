"""Reads of the ledger that other parts need beyond a plain ORM query of their own: what a
dead-letter discard remembers, the secrets webhook deliveries are signed with, what a queued job
waits for, how a batch's jobs stand. The operators' figures are in ``rollups``.

No pyarrow here: the control component's periodic batch checks read through this module every
few seconds, and a process that imported pyarrow and numpy for them carried both for nothing
(NFR-42; the bulk merge that needs them is ``apps.jobs.bulk``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from django.db import connection

from apps.jobs.models import Job, JobStatus, WaitingFor


def jobs_failed_attempts(*, job_ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, int]:
    """The attempt count of each of ``job_ids`` that is ``failed`` (a dead letter); the others
    are left out."""
    failed = Job.objects.filter(id__in=[str(i) for i in job_ids], status=JobStatus.FAILED)
    return dict(failed.values_list("id", "attempts"))


class JobSigning(NamedTuple):
    """Who a job's webhook deliveries belong to, and the secrets that sign them now."""

    tenant_id: uuid.UUID
    secrets: list[str]


def jobs_webhook_secrets(*, job_ids: Iterable[uuid.UUID | str], now: datetime) -> dict[str, JobSigning]:
    """By job id (as text): the job's tenant and its webhook signing secrets at ``now``, the
    current one first, then the one a rotation replaced while its grace period lasts (FR-23)."""
    rows = Job.objects.filter(id__in=[str(i) for i in job_ids]).values_list(
        "id",
        "tenant_id",
        "tenant__webhook_secret",
        "tenant__webhook_secret_previous",
        "tenant__webhook_secret_previous_until",
    )
    found = {}
    for job_id, tenant_id, current, previous, previous_until in rows:
        keys = [current]
        if previous and previous_until is not None and previous_until > now:
            keys.append(previous)
        found[str(job_id)] = JobSigning(tenant_id, keys)
    return found


class JobWait(NamedTuple):
    """What a job waits for (None unless it is queued) and from when it may start (None when
    that is not known: its turn in the dispatch, or a free worker)."""

    waiting_for: str | None
    until: datetime | None


# The columns job_waiting_for reads: a list page loads them with the rest of each row, so telling
# why 500 jobs wait costs no query more.
JOB_WAITING_COLUMNS = ("status", "attempts", "not_before", "published_at", "defer_reason", "deferred_until")


def job_waiting_for(job: Job, *, now: datetime) -> JobWait:
    """Why a queued job has not started, from its row alone.

    Stored where it happens: a domain's refusal (``job_defer_for_domain`` records its reason with
    the not_before it set). Read off the row: a job in the broker waits for a worker
    (``dispatch``); a due job still in the outbox waits for its tenant's turn in the fair
    dispatch (``tenant_share``); a job that has been tried and waits for a later not_before
    than the domain set is backing off a retry (``retry_backoff``: the retry planner sets
    not_before without touching the deferral's columns, so they no longer match)."""
    if job.status != JobStatus.QUEUED:
        return JobWait(None, None)
    if job.published_at is not None:
        return JobWait(WaitingFor.DISPATCH, None)
    if job.not_before is None or job.not_before <= now:
        return JobWait(WaitingFor.TENANT_SHARE, None)
    if job.defer_reason and job.deferred_until == job.not_before:
        return JobWait(job.defer_reason, job.not_before)
    if job.attempts > 0:
        return JobWait(WaitingFor.RETRY_BACKOFF, job.not_before)
    # A not_before nobody here explains (set by hand): the job waits for it, then for its turn.
    return JobWait(WaitingFor.TENANT_SHARE, job.not_before)


def tenant_queued_count(*, tenant_id: uuid.UUID | str, at_most: int) -> int:
    """How many of the tenant's jobs are queued, counting no further than ``at_most`` (a backlog
    cap needs to know only whether it is reached). An index-only walk of jobs_tenant_status_newest
    (tenant, status, -id) bounded by ``at_most``, whatever the backlog."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM (SELECT 1 FROM jobs_job WHERE tenant_id = %s AND status = 'queued'"
            " LIMIT %s) AS q",
            [str(tenant_id), at_most],
        )
        return int(cur.fetchone()[0])


def batch_job_counts(*, batch_id: uuid.UUID) -> dict[str, int]:
    """A batch's jobs by status (GET /batches/{id}); served by jobs_unique_batch_row."""
    with connection.cursor() as cur:
        cur.execute("SELECT status, count(*) FROM jobs_job WHERE batch_id = %s GROUP BY status", [batch_id])
        return {status: n for status, n in cur.fetchall()}


def batch_first_unfinished_row(*, batch_id: uuid.UUID, from_row: int = 0) -> int | None:
    """The lowest ``batch_row`` at or above ``from_row`` whose job is not final (queued or running),
    or None when there is none. Walks jobs_unique_batch_row in row order and stops at the first
    one, so a caller that remembers the answer (apps/batches/completion.py) reads each finished
    job about once over the batch's life instead of at every check."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT batch_row FROM jobs_job
             WHERE batch_id = %s AND batch_row >= %s AND status IN ('queued', 'running')
             ORDER BY batch_row
             LIMIT 1
            """,
            [batch_id, from_row],
        )
        row = cur.fetchone()
    return None if row is None else int(row[0])
