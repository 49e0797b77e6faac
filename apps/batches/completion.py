"""A batch's own webhook (FR-10, docs/webhooks.md): a batch that named a ``callback_url`` is
announced once, by one webhook delivery, when every job of it is final (succeeded, failed or
cancelled; a requeued job is not). From there it is a delivery like a job's: signed, retried,
logged, skipped while the tenant's URL is disabled (apps/webhooks/services.py).

A check, not a counter: counting finished jobs on the batch row would add a write of one hot row
to the final write of every batch job (the writer's fold), and a requeue would have to take it
back. Instead beat runs ``batches_completion_announce`` (scrapejobs/celery.py), which looks at
each batch that is ``loaded`` or ``failed``, asked for a callback and has none enqueued yet:

1. The first job at or above the batch's ``final_below_row`` that is not final, walking
   jobs_unique_batch_row in row order (``batch_first_unfinished_row``). Found: that row becomes
   the batch's ``final_below_row`` and the check moves on. Jobs finish in about row order, so over
   a batch's life each finished job is read about once, not once per check.
2. None: ``_batch_announce`` claims the announcement with a conditional UPDATE (only while
   ``callback_enqueued_at`` is NULL: a second checker's UPDATE waits for the first to commit and
   then matches nothing), counts the batch's jobs by status and, in the same transaction, creates
   the delivery. Should a job be unfinished after all (one below the mark was requeued since it
   was passed), the claim is rolled back and the mark goes back to that job.

A batch whose rows were all rejected is ``loaded`` with no jobs: it is announced at the next
check, as ``batch.completed`` with ``accepted`` 0. A batch that failed (intake, a missing
manifest, a damaged part) is announced as ``batch.failed`` once the jobs it has, if any, are final.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from apps.batches.models import Batch, BatchStatus
from apps.jobs.models import FINAL_STATUSES, JobStatus
from apps.jobs.selectors import batch_first_unfinished_row, batch_job_counts
from apps.webhooks.services import webhook_delivery_create_for_batch

EVENT_COMPLETED = "batch.completed"
EVENT_FAILED = "batch.failed"
# A batch in one of these no longer gains jobs: only then can "every job is final" hold for good.
_ENDED = (BatchStatus.LOADED, BatchStatus.FAILED)


class _NotAllFinal(Exception):
    """Inside the claim: a job of the batch is not final after all; roll the claim back."""

    def __init__(self, row: int | None):
        self.row = row


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat().replace("+00:00", "Z")


def batch_event_type(batch: Batch) -> str:
    return EVENT_COMPLETED if batch.status == BatchStatus.LOADED else EVENT_FAILED


def batch_event_body(batch: Batch, *, jobs: dict[str, int]) -> str:
    """The announcement: ``type`` (``batch.completed`` or ``batch.failed``) and the batch as
    GET /batches/{id} shows it, without its links and rejected rows (the receiver follows up
    there), with every final status counted. Compact JSON: every attempt sends these bytes."""
    payload: dict[str, Any] = {
        "type": batch_event_type(batch),
        "id": str(batch.id),
        "status": batch.status,
        "total": batch.total,
        "accepted": batch.accepted_rows,
        "rejected": batch.rejected,
        "loaded": batch.loaded,
        # ``erased`` (FR-52) only when a job of the batch was erased: receivers written before it
        # see the three counts they know.
        "jobs": {
            status: jobs.get(status, 0)
            for status in FINAL_STATUSES
            if status != JobStatus.ERASED or jobs.get(status, 0)
        },
        "error": batch.error or None,
        "created_at": _iso(batch.created_at),
        "finished_at": _iso(batch.finished_at),
    }
    return json.dumps(payload, separators=(",", ":"))


def batches_completion_announce() -> int:
    """Check every batch waiting for its announcement; returns how many were announced now.
    Safe to run concurrently: a batch is announced once whoever gets there first."""
    # Uses batches_callback_pending.
    waiting = Batch.objects.filter(
        callback_url__isnull=False, callback_enqueued_at__isnull=True, status__in=_ENDED
    ).order_by("id")
    announced = 0
    for batch_id, final_below_row in waiting.values_list("id", "final_below_row"):
        if batch_completion_check(batch_id=batch_id, final_below_row=final_below_row):
            announced += 1
    return announced


def batch_completion_check(*, batch_id: uuid.UUID, final_below_row: int) -> bool:
    """One batch: move its mark up to its first unfinished job, or announce it when there is
    none. True when this call created the announcement."""
    unfinished = batch_first_unfinished_row(batch_id=batch_id, from_row=final_below_row)
    if unfinished is not None:
        if unfinished > final_below_row:
            Batch.objects.filter(id=batch_id, final_below_row__lt=unfinished).update(
                final_below_row=unfinished
            )
        return False
    try:
        return _batch_announce(batch_id=batch_id)
    except _NotAllFinal as e:
        Batch.objects.filter(id=batch_id).update(final_below_row=e.row or 0)
        return False


def _batch_announce(*, batch_id: uuid.UUID) -> bool:
    with transaction.atomic():
        # The claim: one checker's UPDATE matches; a concurrent one waits on the row lock, then
        # finds the stamp set and matches nothing ("another process got there first").
        claimed = Batch.objects.filter(
            id=batch_id, callback_enqueued_at__isnull=True, callback_url__isnull=False, status__in=_ENDED
        ).update(callback_enqueued_at=Now())
        if not claimed:
            return False
        jobs = batch_job_counts(batch_id=batch_id)
        if any(status not in FINAL_STATUSES for status in jobs):
            # Raised out of the atomic block: the claim is rolled back with it.
            raise _NotAllFinal(batch_first_unfinished_row(batch_id=batch_id))
        batch = Batch.objects.get(id=batch_id)
        webhook_delivery_create_for_batch(
            tenant_id=batch.tenant_id,
            batch_id=batch.id,
            event=batch_event_type(batch),
            url=batch.callback_url or "",
            body=batch_event_body(batch, jobs=jobs),
        )
    return True
