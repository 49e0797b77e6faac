"""Reads of the ledger that other parts need beyond a plain ORM query of their own: what a
dead-letter discard remembers, the secrets webhook deliveries are signed with. The operators'
figures are in ``rollups``."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from apps.jobs.models import Job, JobStatus


def jobs_failed_attempts(*, job_ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, int]:
    """The attempt count of each of ``job_ids`` that is ``failed`` (a dead letter); the others
    are left out."""
    failed = Job.objects.filter(id__in=[str(i) for i in job_ids], status=JobStatus.FAILED)
    return dict(failed.values_list("id", "attempts"))


def jobs_webhook_secrets(*, job_ids: Iterable[uuid.UUID | str]) -> dict[str, str]:
    """The webhook signing secret of each job's tenant, by job id (as text)."""
    rows = Job.objects.filter(id__in=[str(i) for i in job_ids]).values_list("id", "tenant__webhook_secret")
    return {str(job_id): secret for job_id, secret in rows}
