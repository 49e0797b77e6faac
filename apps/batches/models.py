"""Batches (FR-10): many job rows in one request, handed to the loader as Parquet
part files plus a manifest in the result storage. The rows here are the ledger of that handoff;
the jobs themselves are ordinary rows of jobs_job (apps/jobs/bulk.py)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from apps.jobs.ids import uuid7


class BatchStatus(models.TextChoices):
    # Intake is writing the parts; no manifest yet, so no loader may touch it.
    RECEIVING = "receiving"
    # The manifest is written: the batch is real and waits for a loader.
    ACCEPTED = "accepted"
    LOADING = "loading"
    LOADED = "loaded"
    FAILED = "failed"


class Batch(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="batches")
    status = models.CharField(max_length=16, choices=BatchStatus.choices, default=BatchStatus.RECEIVING)
    format = models.CharField(max_length=16)
    # Rows in the submitted file; good ones went into parts, bad ones were rejected.
    total = models.PositiveIntegerField(default=0)
    rejected = models.PositiveIntegerField(default=0)
    # The first rejected rows: [{"row": n, "errors": {field: [message]}}], at most
    # SCRAPEJOBS_BATCH_REJECTED_SHOWN of them.
    rejected_rows = models.JSONField(default=list, blank=True)
    # Rows merged into jobs so far, advanced in the same transaction as each part's merge.
    loaded = models.PositiveIntegerField(default=0)
    manifest_key = models.CharField(max_length=512, blank=True, default="")
    error = models.TextField(blank=True, default="")
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    idempotency_fingerprint = models.CharField(max_length=64, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The batch's own webhook (FR-10, docs/webhooks.md): called once every job of the batch is
    # final. NULL: none asked for.
    callback_url = models.TextField(null=True, blank=True)
    # When that call was enqueued as a webhook delivery; set by a conditional UPDATE (only while
    # NULL), so two checkers racing enqueue it once (apps/batches/completion.py).
    callback_enqueued_at = models.DateTimeField(null=True, blank=True)
    # Every job of the batch whose batch_row is below this was final at the last check: the next
    # check starts here instead of rescanning the batch (apps/batches/completion.py).
    final_below_row = models.PositiveIntegerField(default=0)
    # Erasure (FR-53, docs/erasure.md): DELETE /batches/{id} sets ``erase_requested_at`` (once);
    # beat's ``batches-erase`` erases the batch's jobs in chunks of batch_row, advancing
    # ``erase_after_row`` by a conditional UPDATE (a second runner's chunk moves nothing twice),
    # and sets ``erase_finished_at`` when every row is passed and the batch's objects are gone.
    erase_requested_at = models.DateTimeField(null=True, blank=True)
    erase_after_row = models.PositiveIntegerField(default=0)
    erase_finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "batches"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="batches_unique_idempotency_key_per_tenant",
            ),
        ]
        indexes = [
            # batches_resume and batches_orphans_fail (apps/batches/services.py): unfinished batches.
            models.Index(
                fields=["status", "updated_at"],
                condition=Q(status__in=["receiving", "accepted", "loading"]),
                name="batches_unfinished",
            ),
            # batches_completion_announce (apps/batches/completion.py): batches whose callback is
            # not enqueued yet. Only batches that asked for one are in it.
            models.Index(
                fields=["id"],
                condition=Q(callback_url__isnull=False, callback_enqueued_at__isnull=True),
                name="batches_callback_pending",
            ),
            # batches_erase_pending (apps/batches/selectors.py): batches whose erasure is under way.
            models.Index(
                fields=["erase_requested_at"],
                condition=Q(erase_requested_at__isnull=False, erase_finished_at__isnull=True),
                name="batches_erase_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"batch {self.id} [{self.status}]"

    @property
    def accepted_rows(self) -> int:
        return self.total - self.rejected


class BatchPart(models.Model):
    """One Parquet part as the manifest lists it, and when the loader merged it."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="parts")
    number = models.PositiveIntegerField()
    key = models.CharField(max_length=512)
    rows = models.PositiveIntegerField()
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    loaded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["batch", "number"], name="batch_parts_unique_number")]
        ordering = ["batch", "number"]

    def __str__(self) -> str:
        return f"{self.batch_id} part {self.number}"


class BatchLease(models.Model):
    """The loader's claim on a batch: taken with INSERT … ON CONFLICT (only over an expired
    lease), renewed while it works, fencing every part's merge (apps/batches/loader.py)."""

    batch = models.OneToOneField(Batch, on_delete=models.CASCADE, primary_key=True, related_name="lease")
    owner = models.CharField(max_length=200)
    acquired_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.batch_id} held by {self.owner} until {self.expires_at}"
