"""Reads every API app makes. Every read is scoped by tenant: another tenant's job does not
exist, and a malformed id is a job that does not exist either."""

from __future__ import annotations

import uuid

from apps.api.ids import parse_job_id
from apps.jobs.models import Job


def job_exists(*, tenant_id: uuid.UUID, job_id: uuid.UUID | str) -> bool:
    parsed = parse_job_id(job_id)
    return parsed is not None and Job.objects.filter(id=parsed, tenant_id=tenant_id).exists()


def job_idempotency_key_held(*, tenant_id: uuid.UUID, key: str) -> bool:
    """Whether the tenant has a job under this Idempotency-Key (a replay is answered even when
    the tenant's backlog is full). Served by jobs_unique_idempotency_key_per_tenant."""
    return Job.objects.filter(tenant_id=tenant_id, idempotency_key=key).exists()
