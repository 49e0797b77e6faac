"""Reads for the batch endpoints and for GET /jobs?batch= (every one scoped by tenant), and the
control component's periodic checks for batches to load again or to erase: those run every few
seconds in every control process, so this module imports neither pyarrow nor DRF's serializers
(apps/batches/services.py does), and a check that finds nothing to do loads neither (NFR-42)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from apps.batches.models import Batch, BatchStatus
from apps.jobs.selectors import batch_job_counts


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


def batches_to_resume(*, limit: int = 100) -> list[uuid.UUID]:
    """Unfinished batches without a live loader lease: accepted or loading ones whose message was
    lost or whose loader died, and ``receiving`` ones older than a lease (their intake may have
    died after writing the manifest; the loader leaves them alone when it finds none)."""
    stale = timezone.now() - timedelta(seconds=settings.SCRAPEJOBS_BATCH_LEASE_S)
    # Uses batches_unfinished.
    unfinished = Q(status__in=[BatchStatus.ACCEPTED, BatchStatus.LOADING]) | Q(
        status=BatchStatus.RECEIVING, updated_at__lt=stale
    )
    return list(
        Batch.objects.filter(unfinished)
        .exclude(lease__expires_at__gt=Now())
        .order_by("updated_at")
        .values_list("id", flat=True)[:limit]
    )


def batches_erase_pending(*, limit: int = 100) -> list[tuple[uuid.UUID, int]]:
    """(id, erase_after_row) of batches whose erasure is under way, oldest request first
    (batches_erase_pending)."""
    return list(
        Batch.objects.filter(erase_requested_at__isnull=False, erase_finished_at__isnull=True)
        .order_by("erase_requested_at")
        .values_list("id", "erase_after_row")[:limit]
    )
