"""Reads every API app makes. Every read is scoped by tenant: another tenant's job does not
exist, and a malformed id is a job that does not exist either."""

from __future__ import annotations

import uuid

from apps.jobs.models import Job


def parse_job_id(job_id: uuid.UUID | str) -> uuid.UUID | None:
    if isinstance(job_id, uuid.UUID):
        return job_id
    try:
        return uuid.UUID(job_id)
    except (ValueError, TypeError, AttributeError):
        return None


def job_exists(*, tenant_id: uuid.UUID, job_id: uuid.UUID | str) -> bool:
    parsed = parse_job_id(job_id)
    return parsed is not None and Job.objects.filter(id=parsed, tenant_id=tenant_id).exists()
