"""Reads of a tenant's webhook deliveries and disabled callback URLs (FR-38, docs/webhooks.md)."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from django.db.models import OuterRef, Subquery

from apps.webhooks.models import DisabledCallback, WebhookAttempt, WebhookDelivery

MASK = "***"


def url_query_masked(url: str) -> str:
    """The URL with every query value replaced by ``***`` (names kept): a callback URL often
    carries a receiver's token in its query, and the delivery log must not show it."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)] or [parts.query]
    return urlunsplit(parts._replace(query="&".join(f"{name}={MASK}" for name in names)))


def webhook_deliveries_of_tenant(
    *,
    tenant_id: uuid.UUID,
    status: str | None = None,
    job_id: uuid.UUID | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """Up to ``limit`` of the tenant's deliveries, newest first (index webhooks_by_tenant), those
    before ``before_id`` (the cursor), with their last attempt's time. URLs with their query
    masked, in the error text too."""
    found = WebhookDelivery.objects.filter(tenant_id=tenant_id)
    if status is not None:
        found = found.filter(status=status)
    if job_id is not None:
        found = found.filter(job_id=job_id)
    if before_id is not None:
        found = found.filter(id__lt=before_id)
    last_attempt = (
        WebhookAttempt.objects.filter(delivery=OuterRef("pk")).order_by("-number").values("started_at")[:1]
    )
    rows = list(
        found.annotate(last_attempt_at=Subquery(last_attempt))
        .order_by("-id")
        .values(
            "id",
            "event",
            "job_id",
            "batch_id",
            "url",
            "status",
            "attempts",
            "last_status_code",
            "last_attempt_at",
            "last_error",
            "next_attempt_at",
            "created_at",
            "delivered_at",
        )[:limit]
    )
    for row in rows:
        masked = url_query_masked(row["url"])
        if row["last_error"]:
            row["last_error"] = row["last_error"].replace(row["url"], masked)
        row["url"] = masked
    return rows


def disabled_callbacks_of_tenant(*, tenant_id: uuid.UUID) -> list[dict[str, Any]]:
    """The tenant's callback URLs switched off by a ``410``, newest first, query masked."""
    rows: list[dict[str, Any]] = [
        dict(row)
        for row in DisabledCallback.objects.filter(tenant_id=tenant_id)
        .order_by("-disabled_at", "-id")
        .values("id", "url", "disabled_at", "delivery_id")
    ]
    for row in rows:
        row["url"] = url_query_masked(row["url"])
    return rows
