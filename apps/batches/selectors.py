"""Reads for the batch endpoints and for GET /jobs?batch=; every read is scoped by tenant."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta

from django.db.models import Count
from django.db.models.functions import TruncDate

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


def batches_created_by_day(*, tenant_id: uuid.UUID, first: date, last: date) -> dict[date, int]:
    """How many batches the tenant created on each UTC day from ``first`` to ``last`` (GET /usage,
    FR-49): through the tenant's index, so bounded by that tenant's batches, never the ledger."""
    start = datetime.combine(first, time.min, tzinfo=UTC)
    end = datetime.combine(last + timedelta(days=1), time.min, tzinfo=UTC)
    rows = (
        Batch.objects.filter(tenant_id=tenant_id, created_at__gte=start, created_at__lt=end)
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(n=Count("id"))
    )
    return {r["day"]: r["n"] for r in rows}
