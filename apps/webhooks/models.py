"""Webhook deliveries and their log (FR-1 to FR-7, "Webhook"; FR-7).

One ``WebhookDelivery`` per final state a job reached with a ``callback_url`` (a requeued job
that ends again gets another one) or per batch whose jobs all ended, when the batch named a
``callback_url`` (FR-10), and one ``WebhookAttempt`` per HTTP try, kept with its status code and
timing. Polling stays the source of truth: a delivery may fail for good.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its next attempt (or being attempted now)
    DELIVERED = "delivered"  # a 2xx answer
    FAILED = "failed"  # out of attempts, or the callback address is refused
    # Not sent: the tenant's callback URL answered 410 Gone and is disabled (FR-23,
    # ``DisabledCallback``) until an operator re-enables it.
    SKIPPED = "skipped"


class WebhookDelivery(models.Model):
    # The job it announces; NULL for a batch's delivery.
    job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.CASCADE, related_name="webhook_deliveries"
    )
    # A batch's delivery (FR-10): the batch. Plain id, not a foreign key: apps/batches builds on
    # this app, not the reverse. NULL for a job's delivery.
    batch_id = models.UUIDField(null=True, blank=True)
    # Every delivery's tenant, a job's too (filled by webhooks_enqueue_final; NULL only for a
    # job's delivery made before migration 0004 filled them), for the tenant's delivery log
    # (FR-38, index webhooks_by_tenant).
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    # What it announces: the job's final status, or the batch's event ("batch.completed",
    # "batch.failed").
    event = models.CharField(max_length=16)
    url = models.TextField()
    # The exact JSON body, fixed when the delivery is created: every attempt (and a redelivery)
    # sends the same bytes; only the signature's timestamp changes.
    body = models.TextField()
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    # Attempts made so far; also the fencing token of the attempt in flight.
    attempts = models.PositiveIntegerField(default=0)
    # Attempts made before the current round: a redelivery starts the retry schedule afresh.
    retry_from = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    # When the next attempt is due. While an attempt is in flight it is pushed out by a short
    # claim lease, so a deliverer that dies mid-call only delays the delivery.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_duration_ms = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        indexes = [
            # webhook_deliveries_of_tenant (apps/webhooks/selectors.py): a tenant's deliveries,
            # newest first, by cursor (FR-38).
            models.Index(fields=["tenant", "-id"], name="webhooks_by_tenant"),
            # webhook_deliveries_claim_due (apps/webhooks/delivering.py): pending deliveries by due time.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status="pending"),
                name="webhooks_pending_by_due",
            ),
        ]

    def __str__(self) -> str:
        about = self.job_id if self.job_id is not None else f"batch {self.batch_id}"
        return f"{about} {self.event} -> {self.url} [{self.status}]"


class DisabledCallback(models.Model):
    """A tenant's callback URL that answered ``410 Gone`` (FR-23, Standard Webhooks: the receiver
    is gone for good). Jobs naming it are still accepted; their deliveries are recorded as
    ``skipped`` and not sent while this row exists. An operator re-enables the URL in the admin,
    which deletes the row."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    url = models.TextField()
    # SHA-256 of ``url``: callback URLs may be 8 KiB, too long for a unique B-tree entry.
    url_sha256 = models.CharField(max_length=64)
    disabled_at = models.DateTimeField()
    # The delivery whose 410 disabled it.
    delivery = models.ForeignKey(
        "WebhookDelivery", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            # webhooks_enqueue_final and webhook_attempt_record look URLs up by (tenant, hash).
            models.UniqueConstraint(fields=["tenant", "url_sha256"], name="webhooks_disabled_unique_url"),
        ]

    def __str__(self) -> str:
        return f"{self.url} (tenant {self.tenant_id}, disabled {self.disabled_at:%Y-%m-%d %H:%M})"


class WebhookAttempt(models.Model):
    """One POST to the callback: what came back and how long it took."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhook_attempts_unique_number"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.delivery_id} #{self.number}: {self.status_code or self.error}"
