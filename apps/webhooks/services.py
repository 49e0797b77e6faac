"""Webhook deliveries (FR-1 to FR-7, "Webhook"; FR-7): making them, and what an operator or an
erasure does to them.

The flow, each step a short transaction and no network I/O inside any of them:

1. ``webhooks_enqueue_final``: the end-of-job outbox. Whatever made a job final set its
   ``final_published_at`` to NULL in the same write; this turns such jobs into delivery rows (for
   those with a ``callback_url``) and stamps them, in one transaction.
   A batch's announcement (FR-10) is made by apps/batches/completion.py through
   ``webhook_delivery_create_for_batch``; from here on it is a delivery like any other.
2. to 4. The deliverer (apps/webhooks/delivering.py) claims due deliveries, makes each call
   outside any transaction (apps/webhooks/sending.py) and records the attempt.

Retry schedule (``SCRAPEJOBS_WEBHOOK_RETRY_SCHEDULE_S``, each delay +-20% jitter): 10 s, 30 s,
2 min, 10 min, 30 min, 1 h, 2 h, 4 h, 8 h, so 10 attempts over about 15 h 45 min; then the
delivery is ``failed`` and an operator can redeliver it from the admin.

The answers Standard Webhooks gives a meaning to (FR-23, docs/webhooks.md): ``410 Gone`` fails the
delivery and disables the callback URL for the tenant (``DisabledCallback``: the tenant's other
pending deliveries to it, and later ones, are ``skipped`` until an operator re-enables it); a
``429``, ``502``, ``503`` or ``504`` with ``Retry-After`` is retried no sooner than it says; any
other non-2xx, a 3xx included, is a failed attempt retried on the schedule.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.jobs.final_notices import jobs_final_announced_stamp, jobs_final_unannounced_lock
from apps.webhooks.models import DeliveryStatus, DisabledCallback, WebhookAttempt, WebhookDelivery

logger = logging.getLogger(__name__)

ENQUEUE_BATCH_SIZE = 500
SKIPPED_NOTE = (
    "not sent: this callback URL answered 410 Gone and is disabled for the tenant; "
    "re-enable it under Webhooks > Disabled callbacks, then redeliver"
)


def url_digest(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


def _disabled_among(*, pairs: Iterable[tuple[uuid.UUID, str]]) -> set[tuple[uuid.UUID, str]]:
    """Which (tenant, callback URL) pairs are disabled, as (tenant id, URL digest)."""
    wanted = {(tenant_id, url_digest(url)) for tenant_id, url in pairs}
    if not wanted:
        return set()
    rows = DisabledCallback.objects.filter(
        tenant_id__in={t for t, _ in wanted}, url_sha256__in={d for _, d in wanted}
    ).values_list("tenant_id", "url_sha256")
    return set(rows) & wanted


def webhook_body(
    *,
    job_id: uuid.UUID | str,
    status: str,
    finished_at: datetime | None,
    changed: bool | None = None,
    previous_job: uuid.UUID | str | None = None,
) -> str:
    """The event: ``{id, status, finished_at}`` (FR-1 to FR-7), compact JSON; with ``changed``
    and ``previous_job`` for a succeeded job that asked whether its body changed (FR-34)."""
    payload: dict[str, Any] = {
        "id": str(job_id),
        "status": status,
        "finished_at": finished_at.isoformat().replace("+00:00", "Z") if finished_at else None,
    }
    if changed is not None:
        payload["changed"] = changed
        payload["previous_job"] = None if previous_job is None else str(previous_job)
    return json.dumps(payload, separators=(",", ":"))


def webhooks_enqueue_final(*, batch_size: int = ENQUEUE_BATCH_SIZE) -> int:
    """Turn jobs that became final into deliveries; returns how many deliveries were created.

    A job that is requeued and ends again is final again with ``final_published_at`` NULL, and
    gets a second delivery announcing its new final state."""
    created = 0
    while True:
        with transaction.atomic():
            rows = jobs_final_unannounced_lock(limit=batch_size)
            if not rows:
                return created
            now = timezone.now()
            # One statement per batch, and only when some job of it has a callback (FR-23).
            disabled = _disabled_among(pairs=[(j.tenant_id, j.callback_url) for j in rows if j.callback_url])
            deliveries = []
            for job in rows:
                if not job.callback_url:
                    continue
                if job.callback_on == "change" and job.changed is False:
                    continue  # FR-34: an unchanged body is not announced (the fold stamps most)
                skipped = (job.tenant_id, url_digest(job.callback_url)) in disabled
                deliveries.append(
                    WebhookDelivery(
                        job_id=job.id,
                        tenant_id=job.tenant_id,
                        event=job.status,
                        url=job.callback_url,
                        body=webhook_body(
                            job_id=job.id,
                            status=job.status,
                            finished_at=job.finished_at,
                            changed=job.changed if job.status == "succeeded" else None,
                            previous_job=job.previous_job,
                        ),
                        created_at=now,
                        status=DeliveryStatus.SKIPPED if skipped else DeliveryStatus.PENDING,
                        next_attempt_at=None if skipped else now,
                        last_error=SKIPPED_NOTE if skipped else None,
                    )
                )
            WebhookDelivery.objects.bulk_create(deliveries)
            jobs_final_announced_stamp(job_ids=[job.id for job in rows], now=now)
            created += len(deliveries)
        if len(rows) < batch_size:
            return created


def webhook_delivery_create_for_batch(
    *, tenant_id: uuid.UUID, batch_id: uuid.UUID, event: str, url: str, body: str
) -> WebhookDelivery:
    """A batch's announcement (FR-10): one delivery, sent, signed and retried as a job's is, or
    recorded ``skipped`` when the tenant's URL is disabled (FR-23). Call it inside the transaction
    that marks the batch announced, so the two commit together."""
    now = timezone.now()
    skipped = bool(_disabled_among(pairs=[(tenant_id, url)]))
    return WebhookDelivery.objects.create(
        tenant_id=tenant_id,
        batch_id=batch_id,
        event=event,
        url=url,
        body=body,
        created_at=now,
        status=DeliveryStatus.SKIPPED if skipped else DeliveryStatus.PENDING,
        next_attempt_at=None if skipped else now,
        last_error=SKIPPED_NOTE if skipped else None,
    )


def callbacks_reenable(*, callback_ids: Iterable[int], tenant_id: uuid.UUID | None = None) -> int:
    """Re-enable disabled callback URLs (of ``tenant_id`` only, when given): later deliveries to
    them are sent again. Deliveries already skipped stay so; they may be redelivered."""
    found = DisabledCallback.objects.filter(id__in=list(callback_ids))
    if tenant_id is not None:
        found = found.filter(tenant_id=tenant_id)
    deleted, _ = found.delete()
    return deleted


def webhook_deliveries_redeliver(*, delivery_ids: Iterable[int], tenant_id: uuid.UUID | None = None) -> int:
    """Send deliveries again now (of ``tenant_id`` only, when given), whatever their status, with
    a fresh retry schedule; their attempt log continues (numbers keep growing). The same
    ``webhook-id`` (the delivery's id) and body, a new timestamp and signature (FR-23, FR-38)."""
    ids = list(delivery_ids)
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE webhooks_webhookdelivery
               SET status = 'pending', next_attempt_at = %s, retry_from = attempts, delivered_at = NULL
             WHERE id = ANY(%s) AND (%s::uuid IS NULL OR tenant_id = %s::uuid)
               AND url <> ''  -- an erased job's delivery (FR-52) has nowhere to go
            """,
            [timezone.now(), ids, tenant_id, tenant_id],
        )
        return cur.rowcount


def webhook_deliveries_erase(
    *, job_ids: Sequence[uuid.UUID] = (), batch_ids: Sequence[uuid.UUID] = ()
) -> int:
    """Erasure (FR-52, FR-53): these jobs' (or batches') deliveries keep their event, status,
    counts and times, lose their URL, body and errors (which name or quote the receiver and the
    job), and a pending one is not sent (``failed``). Returns the deliveries changed."""
    if not job_ids and not batch_ids:
        return 0
    of = Q(job_id__in=list(job_ids)) | Q(batch_id__in=list(batch_ids))
    with transaction.atomic():
        WebhookAttempt.objects.filter(delivery__in=WebhookDelivery.objects.filter(of)).update(error=None)
        pending = WebhookDelivery.objects.filter(of, status=DeliveryStatus.PENDING).update(
            status=DeliveryStatus.FAILED, next_attempt_at=None
        )
        changed = WebhookDelivery.objects.filter(of).update(url="", body="", last_error=None)
    if pending:
        logger.info("erasure: %d pending webhook deliveries will not be sent", pending)
    return changed
