"""Batch intake (FR-10): check the rows (a Parquet file's whole columns first, then
row by row what that leaves), stream the good ones into Parquet parts, write the manifest last,
and record the batch.

The batch row is inserted first (status ``receiving``), which is what makes ``Idempotency-Key``
work as on POST /jobs: the unique (tenant, key) index lets one request of several concurrent
retries through, and a replay finds the batch. The manifest carries everything the loader needs
(the parts, and the counts of rows and rejects), so a batch whose intake died after writing it is
still loaded in full (``batches_to_resume``, apps/batches/selectors.py); one whose intake died
before it never is, and its parts are removed after a grace period (``batches_orphans_remove``).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import IO, Any

import pyarrow as pa
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Sum
from django.db.models.functions import Now
from django.utils import timezone

from apps.batches.models import Batch, BatchStatus
from apps.batches.parts import PartInfo, batch_objects_remove, manifest_write, orphan_batches, part_write
from apps.batches.rows import RowSource, TooManyColumns, TooManyRows, UnreadableFile
from apps.jobs.erasure import batch_has_unfinished_jobs
from apps.jobs.selectors import tenant_queued_count
from apps.tenants.backlog import (
    TENANT_BATCHES_FULL,
    BacklogFull,
    backlog_full,
    tenant_batches_cap,
    tenant_queued_cap,
)
from apps.tenants.models import Tenant


class BatchIdempotencyConflict(Exception):
    """The Idempotency-Key was used before for another batch body."""


def batch_submit(
    *,
    tenant_id: uuid.UUID,
    source: RowSource,
    format: str,
    idempotency_key: str | None,
    fingerprint: str,
    on_accepted: Callable[[uuid.UUID], None],
    callback_url: str | None = None,
) -> tuple[Batch, bool]:
    """Take a batch; returns ``(batch, created)``. A replayed key returns the batch it made
    (``created`` False); a key used for another body raises ``BatchIdempotencyConflict``.
    ``on_accepted(batch_id)`` runs once the batch is recorded as accepted (after commit).
    ``callback_url`` (already checked) is called once every job of the batch is final
    (apps/batches/completion.py)."""
    if source.count is not None and source.count > settings.SCRAPEJOBS_BATCH_MAX_ROWS:
        raise TooManyRows(source.count)
    batch, created = _batch_begin(
        tenant_id=tenant_id,
        source=source,
        format=format,
        idempotency_key=idempotency_key,
        fingerprint=fingerprint,
        callback_url=callback_url,
    )
    if not created:
        return batch, False
    total, rejected, rejected_rows, manifest = _batch_write(batch=batch, tenant_id=tenant_id, source=source)
    with transaction.atomic():
        Batch.objects.filter(id=batch.id, status=BatchStatus.RECEIVING).update(
            status=BatchStatus.ACCEPTED,
            total=total,
            rejected=rejected,
            rejected_rows=rejected_rows,
            manifest_key=manifest,
            updated_at=Now(),
        )
        transaction.on_commit(lambda: on_accepted(batch.id))
    batch.refresh_from_db()
    return batch, True


def _batch_begin(
    *,
    tenant_id: uuid.UUID,
    source: RowSource,
    format: str,
    idempotency_key: str | None,
    fingerprint: str,
    callback_url: str | None,
) -> tuple[Batch, bool]:
    """The batch's row, ``receiving``, once the tenant's caps leave room for it; or the batch its
    key already made (``created`` False)."""
    try:
        with transaction.atomic():  # a savepoint when the caller holds a transaction
            # A JSON list is counted as it is read (NFR-20): up front it takes no room, and its
            # rows are checked against the room once read, before the manifest makes it real.
            replayed = _backlog_room_check(
                tenant_id=tenant_id, rows=source.count or 0, idempotency_key=idempotency_key
            )
            if replayed is not None:
                if replayed.idempotency_fingerprint != fingerprint:
                    raise BatchIdempotencyConflict()
                return replayed, False
            batch = Batch.objects.create(
                tenant_id=tenant_id,
                format=format,
                total=source.count or 0,
                idempotency_key=idempotency_key,
                idempotency_fingerprint=fingerprint if idempotency_key else None,
                callback_url=callback_url,
            )
    except IntegrityError:
        existing = Batch.objects.filter(tenant_id=tenant_id, idempotency_key=idempotency_key).first()
        if existing is None:  # cannot be: keys of batches are never released
            raise
        if existing.idempotency_fingerprint != fingerprint:
            raise BatchIdempotencyConflict() from None
        return existing, False
    return batch, True


def _batch_write(
    *, batch: Batch, tenant_id: uuid.UUID, source: RowSource
) -> tuple[int, int, list[dict[str, Any]], str]:
    """The batch's parts and its manifest, written last: (total, rejected, rejected rows, the
    manifest's key). On any failure nothing stays published, and the batch row goes (the client's
    file) or is marked failed (ours)."""
    try:
        parts, total, rejected_rows, rejected = _rows_to_parts(batch.id, source)
        if source.count is None:
            _backlog_rows_check(tenant_id=tenant_id, rows=total)
        manifest = manifest_write(
            batch_id=batch.id,
            tenant_id=tenant_id,
            parts=parts,
            counts={"total": total, "rejected": rejected, "rejected_rows": rejected_rows},
        )
    except BaseException as e:
        # Nothing was published: the parts written so far go now rather than after the grace.
        batch_objects_remove(batch_id=batch.id)
        if isinstance(e, UnreadableFile | TooManyRows | TooManyColumns | BacklogFull):
            # The client's file, damaged or over a limit past what could be checked up front
            # (a JSON list is counted as it is read): a 400 or 413, and bad input changes
            # nothing, so the batch row goes too (its key may be used again).
            Batch.objects.filter(id=batch.id).delete()
        else:
            Batch.objects.filter(id=batch.id).update(
                status=BatchStatus.FAILED, error=f"intake failed: {e}", finished_at=Now()
            )
        raise
    return total, rejected, rejected_rows, manifest


_IN_PROGRESS = (BatchStatus.RECEIVING, BatchStatus.ACCEPTED, BatchStatus.LOADING)


def _backlog_room_check(*, tenant_id: uuid.UUID, rows: int, idempotency_key: str | None) -> Batch | None:
    """Within the batch's transaction, before its row exists: the batch this key already made
    (a replay, answered whatever the caps), else None once the tenant's caps leave room for one
    more batch in progress and ``rows`` more queued jobs (FR-20), else raise ``BacklogFull``. The
    rows of batches not yet loaded count as queued already, and every row of the file counts
    (rejected ones are known only after reading it): a batch over the room left is refused
    whole, before anything is written. A lock per tenant makes two batches at once check one
    after the other (batches are few; plain jobs never take it)."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"batch-intake:{tenant_id}"])
    if idempotency_key is not None:
        existing = Batch.objects.filter(tenant_id=tenant_id, idempotency_key=idempotency_key).first()
        if existing is not None:
            return existing
    tenant = Tenant.objects.only("max_queued_jobs", "max_batches_in_progress").get(id=tenant_id)
    open_batches = Batch.objects.filter(tenant_id=tenant_id, status__in=_IN_PROGRESS)
    batches_cap = tenant_batches_cap(tenant)
    if batches_cap > 0 and open_batches.count() >= batches_cap:
        raise BacklogFull(
            TENANT_BATCHES_FULL,
            f"This tenant has {batches_cap} batches received and not yet loaded, its cap. "
            "Submit again once one has loaded.",
        )
    _backlog_rows_check(tenant_id=tenant_id, rows=rows, tenant=tenant)
    return None


def _backlog_rows_check(*, tenant_id: uuid.UUID, rows: int, tenant: Tenant | None = None) -> None:
    """Raise ``BacklogFull`` unless the tenant's queued jobs, the unloaded rows of its batches in
    progress and ``rows`` more fit under its cap (FR-20)."""
    tenant = tenant or Tenant.objects.only("max_queued_jobs").get(id=tenant_id)
    queued_cap = tenant_queued_cap(tenant)
    if queued_cap <= 0:
        return
    open_batches = Batch.objects.filter(tenant_id=tenant_id, status__in=_IN_PROGRESS)
    unloaded = open_batches.aggregate(n=Sum(F("total") - F("rejected") - F("loaded"), default=0))["n"]
    queued = tenant_queued_count(tenant_id=tenant_id, at_most=queued_cap) + max(int(unloaded), 0)
    if queued + rows > queued_cap:
        raise backlog_full(queued=queued, adding=rows, cap=queued_cap)


def _rows_to_parts(
    batch_id: uuid.UUID, source: RowSource
) -> tuple[list[PartInfo], int, list[dict[str, Any]], int]:
    """Check every row; good ones go into parts of SCRAPEJOBS_BATCH_PART_ROWS rows. Returns the
    parts, the number of rows read, the first rejected rows shown and the count of rejected."""
    per_part = settings.SCRAPEJOBS_BATCH_PART_ROWS
    shown = settings.SCRAPEJOBS_BATCH_REJECTED_SHOWN
    parts: list[PartInfo] = []
    rejected_rows: list[dict[str, Any]] = []
    rejected = 0
    total = 0
    pending: list[pa.Table] = []
    pending_rows = 0
    for checked in source.chunks:
        total += checked.rows
        rejected += len(checked.rejected)
        for number, errors in checked.rejected[: max(shown - len(rejected_rows), 0)]:
            rejected_rows.append({"row": number, "errors": errors})
        pending.append(checked.table)
        pending_rows += checked.table.num_rows
        while pending_rows >= per_part:
            table = pa.concat_tables(pending)
            parts.append(part_write(batch_id=batch_id, number=len(parts), table=table.slice(0, per_part)))
            pending, pending_rows = [table.slice(per_part)], table.num_rows - per_part
    if pending_rows:
        parts.append(part_write(batch_id=batch_id, number=len(parts), table=pa.concat_tables(pending)))
    return parts, total, rejected_rows, rejected


def batches_orphans_remove() -> tuple[int, int]:
    """Housekeeping (beat): remove the objects of batches that never got a manifest once they are
    older than SCRAPEJOBS_BATCH_ORPHAN_GRACE_S, and fail batches still ``receiving`` then.
    Returns (object sets removed, batches failed)."""
    grace = timedelta(seconds=settings.SCRAPEJOBS_BATCH_ORPHAN_GRACE_S)
    removed = 0
    for batch_id in orphan_batches(older_than=grace):
        batch_objects_remove(batch_id=batch_id)
        removed += 1
    # Uses batches_unfinished.
    failed = Batch.objects.filter(status=BatchStatus.RECEIVING, updated_at__lt=timezone.now() - grace).update(
        status=BatchStatus.FAILED, error="intake did not finish: no manifest was written", finished_at=Now()
    )
    return removed, failed


def batch_fingerprint_of(fh: IO[bytes], *, format: str, callback_url: str | None = None) -> str:
    """SHA-256 of the submitted bytes, their format and the batch's callback URL: the same file
    with the same callback again is a replay. Without a callback the digest is what it was before
    batches had one (a format name never holds a \\x01, so the two forms cannot collide)."""
    prefix = format.encode() + (b"\0" if callback_url is None else b"\x01" + callback_url.encode() + b"\0")
    digest = hashlib.sha256(prefix)
    fh.seek(0)
    while chunk := fh.read(1 << 20):
        digest.update(chunk)
    fh.seek(0)
    return digest.hexdigest()


class BatchNotErasable(Exception):
    """The batch is still loading, or has jobs that are not final: cancel it first."""


def batch_erase_request(*, batch: Batch) -> Batch:
    """DELETE /batches/{id} (FR-53): mark the batch for erasure, once (a second request changes
    nothing); beat's ``batches-erase`` does the work. ``BatchNotErasable`` while it is loading or
    has a queued or running job."""
    if batch.status not in (BatchStatus.LOADED, BatchStatus.FAILED) or batch_has_unfinished_jobs(
        batch_id=batch.id
    ):
        raise BatchNotErasable(batch.status)
    Batch.objects.filter(id=batch.id, erase_requested_at__isnull=True).update(
        erase_requested_at=Now(), updated_at=Now()
    )
    return Batch.objects.get(id=batch.id)


def batch_erase_advance(*, batch_id: uuid.UUID, from_row: int, to_row: int) -> bool:
    """Record that every job up to ``to_row`` is erased; conditional on the row this runner
    started from, so a second runner's chunk is recorded once. False: another got there first."""
    return bool(
        Batch.objects.filter(id=batch_id, erase_after_row=from_row, erase_finished_at__isnull=True).update(
            erase_after_row=to_row, updated_at=Now()
        )
    )


def batch_erase_finish(*, batch_id: uuid.UUID) -> int:
    """Every job of the batch is erased: remove its objects (a failed batch still has its parts),
    forget what it kept of the rows (rejected rows quote them; its callback URL) and mark it
    done. Returns the objects removed."""
    removed = batch_objects_remove(batch_id=batch_id)
    Batch.objects.filter(id=batch_id, erase_finished_at__isnull=True).update(
        rejected_rows=[], error="", callback_url=None, erase_finished_at=Now(), updated_at=Now()
    )
    return removed
