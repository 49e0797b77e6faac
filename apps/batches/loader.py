"""The loader (FR-10, docs/design/batches.md): claim a batch, check its parts, merge them.

Claim: ``INSERT … ON CONFLICT`` on batches_batchlease, which takes the row only when it is free
or its lease has expired, so two loaders waking at once cannot both win and a dead loader's batch
is taken over one lease later. A keeper thread renews the lease while the loader works.

Check first, then load: every part the manifest lists is fetched and compared with its entry
(size, SHA-256, rows, columns) before anything is merged, so a damaged part fails the batch with
its reason and loads nothing of it.

One transaction per part: the part's COPY and merge into jobs (apps/jobs/bulk.py), its
``loaded_at`` and the batch's ``loaded`` counter (the receipt) commit together. Per part rather
than per batch because a batch may be a million rows: one transaction would hold its locks and
its whole undo for the entire load, show no progress, and a loader killed at 90% would redo
everything; per part, a killed loader's successor redoes at most one part, and progress is
visible. Exactly once holds either way: the receipt and the rows commit together, the natural
key (batch id, row number) makes a merge of an already merged part insert nothing, and every
part's transaction first renews the lease under its owner's name (a fence: a loader that lost
its lease rolls back instead of racing its successor).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from apps.batches.models import Batch, BatchPart, BatchStatus
from apps.batches.parts import (
    Manifest,
    ManifestMissing,
    PartDamaged,
    batch_parts_remove,
    manifest_key,
    manifest_read,
    part_fetch,
    part_table,
)
from apps.jobs.bulk import jobs_bulk_merge
from apps.jobs.intake import publisher_nudge

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """Another loader holds the batch now (ours expired and was taken over)."""


_TAKE = """
    INSERT INTO batches_batchlease (batch_id, owner, acquired_at, expires_at)
    VALUES (%(batch)s, %(owner)s, now(), now() + make_interval(secs => %(lease)s))
    ON CONFLICT (batch_id) DO UPDATE
       SET owner = EXCLUDED.owner, acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
     WHERE batches_batchlease.expires_at < now() OR batches_batchlease.owner = EXCLUDED.owner
    RETURNING owner
"""
_RENEW = """
    UPDATE batches_batchlease SET expires_at = now() + make_interval(secs => %(lease)s)
     WHERE batch_id = %(batch)s AND owner = %(owner)s
"""
_RELEASE = "DELETE FROM batches_batchlease WHERE batch_id = %(batch)s AND owner = %(owner)s"


def loader_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _lease_sql(sql: str, *, batch_id: uuid.UUID, owner: str) -> int:
    with connection.cursor() as cur:
        cur.execute(sql, {"batch": batch_id, "owner": owner, "lease": settings.SCRAPEJOBS_BATCH_LEASE_S})
        return cur.rowcount


def batch_lease_take(*, batch_id: uuid.UUID, owner: str) -> bool:
    """Claim the batch: True when ``owner`` holds it now."""
    return _lease_sql(_TAKE, batch_id=batch_id, owner=owner) == 1


def batch_lease_renew(*, batch_id: uuid.UUID, owner: str) -> bool:
    return _lease_sql(_RENEW, batch_id=batch_id, owner=owner) == 1


def batch_lease_release(*, batch_id: uuid.UUID, owner: str) -> None:
    _lease_sql(_RELEASE, batch_id=batch_id, owner=owner)


class _LeaseKeeper(threading.Thread):
    """Renews the lease every third of its length until stopped (its own database connection)."""

    def __init__(self, batch_id: uuid.UUID, owner: str):
        super().__init__(name=f"batch-lease {batch_id}", daemon=True)
        self.batch_id, self.owner = batch_id, owner
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(settings.SCRAPEJOBS_BATCH_LEASE_S / 3):
                try:
                    if not batch_lease_renew(batch_id=self.batch_id, owner=self.owner):
                        return  # taken over: the next part's fence stops the loader
                except Exception:  # noqa: BLE001 - a failed renewal is retried at the next tick
                    logger.warning("renewing the lease of batch %s failed", self.batch_id, exc_info=True)
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=5)


def batch_load(*, batch_id: uuid.UUID, owner: str | None = None) -> str:
    """Load a batch if it is free; returns what happened (``held``, ``not_ready``, ``loaded``,
    ``failed``, or the final status it already had). Safe to run any number of times."""
    owner = owner or loader_owner()
    if not batch_lease_take(batch_id=batch_id, owner=owner):
        return "held"
    keeper = _LeaseKeeper(batch_id, owner)
    keeper.start()
    try:
        return _load_leased(batch_id, owner)
    finally:
        keeper.stop()
        batch_lease_release(batch_id=batch_id, owner=owner)


def _load_leased(batch_id: uuid.UUID, owner: str) -> str:
    batch = Batch.objects.get(id=batch_id)
    if batch.status in (BatchStatus.LOADED, BatchStatus.FAILED):
        return batch.status
    try:
        manifest = manifest_read(batch_id=batch_id)
    except ManifestMissing as e:
        if batch.status == BatchStatus.RECEIVING:
            return "not_ready"  # intake has not published it (or died before): never loaded
        _batch_fail(batch_id, str(e))
        return BatchStatus.FAILED
    _manifest_record(batch, manifest)
    done = set(
        BatchPart.objects.filter(batch_id=batch_id, loaded_at__isnull=False).values_list("number", flat=True)
    )
    pending = [p for p in manifest.parts if p.number not in done]
    paths: dict[int, str] = {}
    try:
        try:
            for part in pending:
                paths[part.number] = part_fetch(part)
        except PartDamaged as e:
            _batch_fail(batch_id, str(e))
            return BatchStatus.FAILED
        for part in pending:
            _part_merge(batch, owner, number=part.number, rows=part.rows, path=paths[part.number])
    finally:
        for path in paths.values():
            os.unlink(path)
    # Every row is in jobs_job now: the parts (each row's URL, headers and body) go (FR-53). The
    # manifest goes last, after the batch is marked loaded: a loader that dies between two of
    # these steps leaves a manifest whose parts are all merged, and its successor finds nothing
    # to fetch, marks the batch loaded and removes the manifest.
    batch_parts_remove(keys=[p.key for p in manifest.parts])
    Batch.objects.filter(id=batch_id, status=BatchStatus.LOADING).update(
        status=BatchStatus.LOADED, finished_at=Now(), updated_at=Now()
    )
    batch_parts_remove(keys=[manifest_key(batch_id)])
    return BatchStatus.LOADED


def _manifest_record(batch: Batch, manifest: Manifest) -> None:
    """What the manifest says, into the ledger (once): the counts and a row per part. Intake
    recorded the same already unless it died after writing the manifest."""
    with transaction.atomic():
        BatchPart.objects.bulk_create(
            [
                BatchPart(
                    batch_id=batch.id, number=p.number, key=p.key, rows=p.rows, size=p.size, sha256=p.sha256
                )
                for p in manifest.parts
            ],
            ignore_conflicts=True,
        )
        counts = manifest.counts
        Batch.objects.filter(id=batch.id).update(
            status=BatchStatus.LOADING,
            total=counts["total"],
            rejected=counts["rejected"],
            rejected_rows=counts["rejected_rows"],
            updated_at=Now(),
        )


def _part_merge(batch: Batch, owner: str, *, number: int, rows: int, path: str) -> None:
    """One part's transaction: fence, COPY and merge, the part's receipt and the batch's counter."""
    with transaction.atomic():
        # The fence: renewing under our name locks the lease row until commit, so a would-be
        # successor's claim waits for this part and then finds the lease renewed.
        if not batch_lease_renew(batch_id=batch.id, owner=owner):
            raise LeaseLost(f"batch {batch.id}: lease lost before part {number}")
        jobs_bulk_merge(tenant_id=batch.tenant_id, batch_id=batch.id, part=number, table=part_table(path))
        marked = BatchPart.objects.filter(batch_id=batch.id, number=number, loaded_at__isnull=True).update(
            loaded_at=Now()
        )
        if marked:
            Batch.objects.filter(id=batch.id).update(loaded=F("loaded") + rows, updated_at=Now())
        transaction.on_commit(publisher_nudge)


def _batch_fail(batch_id: uuid.UUID, reason: str) -> None:
    logger.warning("batch %s failed: %s", batch_id, reason)
    Batch.objects.filter(id=batch_id).exclude(status=BatchStatus.LOADED).update(
        status=BatchStatus.FAILED, error=reason, finished_at=Now(), updated_at=Now()
    )
