"""Reads for the batch endpoints and for GET /jobs?batch=; every read is scoped by tenant."""

from __future__ import annotations

import uuid

from apps.batches.models import Batch
from apps.jobs.bulk import batch_job_counts


def _batch_id_parsed(raw: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None


def batch_get(*, tenant_id: uuid.UUID, batch_id: str) -> Batch | None:
    """The tenant's batch, or None (missing, malformed id, or another tenant's: all alike)."""
    parsed = _batch_id_parsed(batch_id)
    if parsed is None:
        return None
    return Batch.objects.filter(id=parsed, tenant_id=tenant_id).first()


def batch_exists(*, tenant_id: uuid.UUID, batch_id: uuid.UUID) -> bool:
    return Batch.objects.filter(id=batch_id, tenant_id=tenant_id).exists()


def batch_jobs_by_status(*, batch_id: uuid.UUID) -> dict[str, int]:
    return batch_job_counts(batch_id=batch_id)
