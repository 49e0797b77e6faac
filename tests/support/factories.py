"""Rows for tests, made through the services the API uses (so every rule of intake applies)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from apps.jobs.intake import job_create
from apps.jobs.models import Job


def job_make(tenant: Any, url: str = "http://example.test/x", **fields: Any) -> Job:
    """A queued job of ``tenant`` for ``url``, its domain the URL's host, as intake makes it."""
    fields.setdefault("domain", urlsplit(url).hostname or "")
    job, created = job_create(tenant_id=tenant.pk, url=url, **fields)
    assert created, "job_make made no new job (an Idempotency-Key replay?)"
    return job
