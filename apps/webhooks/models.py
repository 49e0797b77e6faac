"""Webhook deliveries and their log (contract 2, "Webhook"; FR-7).

One ``WebhookDelivery`` per final state a job reached with a ``callback_url`` (a requeued job
that ends again gets another one), and one ``WebhookAttempt`` per HTTP try, kept with its status
code and timing. Polling stays the source of truth: a delivery may fail for good.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its next attempt (or being attempted now)
    DELIVERED = "delivered"  # a 2xx answer
    FAILED = "failed"  # out of attempts, or the callback address is refused


class WebhookDelivery(models.Model):
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="webhook_deliveries")
    # The job's final status this delivery announces.
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
            # webhook_deliveries_claim_due (apps/webhooks/services.py): pending deliveries by due time.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status="pending"),
                name="webhooks_pending_by_due",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.event} -> {self.url} [{self.status}]"


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
