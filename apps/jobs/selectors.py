"""Reads of the ledger that other parts need beyond a plain ORM query of their own: the operators'
metrics, what a dead-letter discard remembers, the secrets webhook deliveries are signed with."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection

from apps.jobs.models import Job, JobStatus


@dataclass
class JobCounts:
    """The ledger at a glance (``/metrics``)."""

    by_status: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in JobStatus})
    oldest_queued_age_s: float = 0.0  # 0 when nothing is queued
    running_past_lease: int = 0  # their worker is gone; the sweeper will requeue them


# One statement, one pass over jobs_job per scrape (O(jobs); a scrape every 15-60 s is fine up to
# millions of rows). Kept exact rather than estimated because alerts watch the queued figures.
_COUNTS_SQL = """
SELECT status,
       count(*),
       EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 'queued')),
       count(*) FILTER (WHERE status = 'running' AND lease_expires_at < now())
  FROM jobs_job
 GROUP BY status
"""


def jobs_counts() -> JobCounts:
    """Jobs by status, the age of the oldest queued job, running jobs past their lease."""
    counts = JobCounts()
    with connection.cursor() as cur:
        cur.execute(_COUNTS_SQL)
        for status, count, age, expired in cur.fetchall():
            counts.by_status[status] = count
            if status == JobStatus.QUEUED and age is not None:
                counts.oldest_queued_age_s = float(age)
            if status == JobStatus.RUNNING:
                counts.running_past_lease = expired
    return counts


def jobs_failed_attempts(*, job_ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, int]:
    """The attempt count of each of ``job_ids`` that is ``failed`` (a dead letter); the others
    are left out."""
    failed = Job.objects.filter(id__in=[str(i) for i in job_ids], status=JobStatus.FAILED)
    return dict(failed.values_list("id", "attempts"))


def jobs_webhook_secrets(*, job_ids: Iterable[uuid.UUID | str]) -> dict[str, str]:
    """The webhook signing secret of each job's tenant, by job id (as text)."""
    rows = Job.objects.filter(id__in=[str(i) for i in job_ids]).values_list("id", "tenant__webhook_secret")
    return {str(job_id): secret for job_id, secret in rows}
