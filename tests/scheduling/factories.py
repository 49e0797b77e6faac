"""Rows for the scheduler's tests, made through the real services."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from apps.jobs.claims import job_claim
from apps.jobs.intake import job_create
from apps.jobs.models import Job


def queued_job(
    tenant: Any, *, url: str = "http://example.test/x", domain: str = "example.test", **kw: Any
) -> Job:
    job, created = job_create(tenant_id=tenant.id, url=url, domain=domain, **kw)
    assert created
    return job


def running_job(tenant: Any, *, worker: str = "w1@host:1:1", lease_left_s: float = -1, **kw: Any) -> Job:
    """A job claimed by ``worker`` whose lease ends ``lease_left_s`` from now (negative: expired)."""
    job = queued_job(tenant, **kw)
    claimed = job_claim(job_id=job.id, worker=worker)
    assert claimed is not None
    Job.objects.filter(id=job.id).update(lease_expires_at=timezone.now() + timedelta(seconds=lease_left_s))
    job.refresh_from_db()
    return job
