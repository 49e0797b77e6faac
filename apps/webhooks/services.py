"""Webhook deliveries (FR-1 to FR-7, "Webhook"; FR-7).

The flow, each step a short transaction and no network I/O inside any of them:

1. ``webhooks_enqueue_final``: the end-of-job outbox. Whatever made a job final set its
   ``final_published_at`` to NULL in the same write; this turns such jobs into delivery rows (for
   those with a ``callback_url``) and stamps them, in one transaction.
   A batch's announcement (FR-10) is made by apps/batches/completion.py through
   ``webhook_delivery_create_for_batch``; from here on it is a delivery like any other.
2. ``webhook_deliveries_claim_due``: a deliverer claims due deliveries (SKIP LOCKED) and pushes
   their due time out by a short lease, so a deliverer that dies mid-call only delays them.
3. ``webhook_post`` (apps/webhooks/sending.py) makes the call, outside any transaction.
4. ``webhook_attempt_record`` logs the attempt and plans the next one, fenced on the attempt
   number: a deliverer whose claim lease ran out cannot overwrite a newer attempt.

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
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.jobs.final_notices import jobs_final_announced_stamp, jobs_final_unannounced_lock
from apps.jobs.selectors import jobs_webhook_secrets
from apps.tenants.selectors import tenants_webhook_secrets
from apps.webhooks.models import DeliveryStatus, DisabledCallback, WebhookAttempt, WebhookDelivery
from apps.webhooks.sending import PostOutcome, webhook_post
from apps.webhooks.signing import SIGNATURE_HEADER, signature_header, standard_headers

logger = logging.getLogger(__name__)

ENQUEUE_BATCH_SIZE = 500
# How long a claimed delivery stays invisible to other deliverers: one call's bound plus margin.
CLAIM_MARGIN_S = 30.0
JITTER = 0.2
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


@dataclass(frozen=True)
class ClaimedDelivery:
    id: int
    attempt: int
    url: str
    body: str
    # Current first; two while a rotation's grace period lasts (FR-23).
    secrets: list[str]
    # Whose it is: the deliverer holds a tenant to its share of the calls in flight.
    tenant_id: str | None = None


def webhook_deliveries_claim_due(
    *, limit: int, now: datetime | None = None, skip_tenants: Sequence[str] = ()
) -> list[ClaimedDelivery]:
    """Claim up to ``limit`` due deliveries, none of ``skip_tenants``' (those already at their
    share of the calls in flight): attempt + 1 and the due time pushed out by the claim lease, in
    one statement. Returns what is needed to make the call."""
    now = now or timezone.now()
    lease_until = now + timedelta(seconds=settings.SCRAPEJOBS_WEBHOOK_TIMEOUT_S + CLAIM_MARGIN_S)
    with connection.cursor() as cur:
        # Uses the partial index webhooks_pending_by_due.
        cur.execute(
            """
            WITH due AS (
                SELECT id FROM webhooks_webhookdelivery
                 WHERE status = 'pending' AND next_attempt_at <= %s
                   AND (tenant_id IS NULL OR NOT tenant_id = ANY(%s::uuid[]))
                 ORDER BY next_attempt_at
                 LIMIT %s
                   FOR UPDATE SKIP LOCKED
            )
            UPDATE webhooks_webhookdelivery AS d
               SET attempts = d.attempts + 1, next_attempt_at = %s
              FROM due
             WHERE d.id = due.id
         RETURNING d.id, d.attempts, d.url, d.body, d.job_id, d.tenant_id
            """,
            [now, list(skip_tenants), limit, lease_until],
        )
        rows = cur.fetchall()
    if not rows:
        return []
    # The signing secrets are the tenant's: the job's, or the batch delivery's own. A job deleted
    # meanwhile took its deliveries with it (on_delete=CASCADE): nothing to send for those.
    by_job = jobs_webhook_secrets(job_ids=[job_id for *_, job_id, _t in rows if job_id is not None], now=now)
    by_tenant = tenants_webhook_secrets(
        tenant_ids=[tenant_id for *_, job_id, tenant_id in rows if job_id is None and tenant_id is not None],
        now=now,
    )
    claimed = []
    for delivery_id, attempt, url, body, job_id, tenant_id in rows:
        if job_id is not None:
            secrets = by_job[str(job_id)].secrets if str(job_id) in by_job else None
        else:
            secrets = by_tenant.get(str(tenant_id))
        if secrets is not None:
            claimed.append(
                ClaimedDelivery(
                    delivery_id, attempt, url, body, secrets, None if tenant_id is None else str(tenant_id)
                )
            )
    return claimed


def _retry_delay(*, retry_index: int, rng: random.Random | None = None) -> float | None:
    """Seconds before the retry after attempt ``retry_index + 1`` of a round; None when the
    schedule is used up."""
    schedule = settings.SCRAPEJOBS_WEBHOOK_RETRY_SCHEDULE_S
    if retry_index >= len(schedule):
        return None
    return schedule[retry_index] * (rng or random).uniform(1 - JITTER, 1 + JITTER)


def webhook_attempt_record(
    *,
    delivery_id: int,
    attempt: int,
    started_at: datetime,
    outcome: PostOutcome,
    rng: random.Random | None = None,
) -> str | None:
    """Log one attempt and move the delivery on: ``delivered`` on a 2xx, ``failed`` when the
    error is permanent or the retry schedule is used up, else due again after the next delay.
    Returns the delivery's new status, or None when the attempt was stale (a newer one exists)."""
    now = timezone.now()
    with transaction.atomic():
        WebhookAttempt.objects.bulk_create(
            [
                WebhookAttempt(
                    delivery_id=delivery_id,
                    number=attempt,
                    started_at=started_at,
                    duration_ms=outcome.duration_ms,
                    status_code=outcome.status_code,
                    error=(outcome.error or None) and outcome.error[:2000],
                )
            ],
            ignore_conflicts=True,
        )
        delivery = (
            WebhookDelivery.objects.select_for_update()
            .filter(id=delivery_id, attempts=attempt, status=DeliveryStatus.PENDING)
            .only("id", "retry_from")
            .first()
        )
        if delivery is None:
            return None
        changes: dict[str, object] = {
            "last_status_code": outcome.status_code,
            "last_duration_ms": outcome.duration_ms,
            "last_error": (outcome.error or None) and outcome.error[:2000],
        }
        gone = outcome.status_code == 410
        delay = (
            None
            if outcome.ok or outcome.permanent or gone
            else _retry_delay(retry_index=attempt - delivery.retry_from - 1, rng=rng)
        )
        if delay is not None and outcome.retry_after_s is not None:
            # The receiver asked for a pause (FR-23): never sooner than it said.
            delay = max(delay, outcome.retry_after_s)
        if outcome.ok:
            changes.update(status=DeliveryStatus.DELIVERED, delivered_at=now, next_attempt_at=None)
        elif gone:
            changes.update(status=DeliveryStatus.FAILED, next_attempt_at=None)
            _callback_disable(delivery_id=delivery_id, now=now)
        elif delay is None:
            changes.update(status=DeliveryStatus.FAILED, next_attempt_at=None)
        else:
            changes.update(next_attempt_at=now + timedelta(seconds=delay))
        WebhookDelivery.objects.filter(id=delivery_id, attempts=attempt).update(**changes)
        return str(changes.get("status", DeliveryStatus.PENDING))


def _callback_disable(*, delivery_id: int, now: datetime) -> None:
    """A 410 Gone: disable the delivery's URL for its tenant and skip the tenant's other pending
    deliveries to it. Inside the caller's transaction."""
    tenant_id, url = (
        WebhookDelivery.objects.filter(id=delivery_id)
        .values_list(Coalesce("tenant_id", "job__tenant_id"), "url")
        .get()
    )
    DisabledCallback.objects.bulk_create(
        [
            DisabledCallback(
                tenant_id=tenant_id,
                url=url,
                url_sha256=url_digest(url),
                disabled_at=now,
                delivery_id=delivery_id,
            )
        ],
        ignore_conflicts=True,
    )
    WebhookDelivery.objects.filter(
        Q(job__tenant_id=tenant_id) | Q(tenant_id=tenant_id), status=DeliveryStatus.PENDING, url=url
    ).exclude(id=delivery_id).update(
        status=DeliveryStatus.SKIPPED, next_attempt_at=None, last_error=SKIPPED_NOTE
    )


def callbacks_reenable(*, callback_ids: Iterable[int], tenant_id: uuid.UUID | None = None) -> int:
    """Re-enable disabled callback URLs (of ``tenant_id`` only, when given): later deliveries to
    them are sent again. Deliveries already skipped stay so; they may be redelivered."""
    found = DisabledCallback.objects.filter(id__in=list(callback_ids))
    if tenant_id is not None:
        found = found.filter(tenant_id=tenant_id)
    deleted, _ = found.delete()
    return deleted


def delivery_headers(
    *, claimed: ClaimedDelivery, body: bytes, timestamp: int | None = None
) -> dict[str, str]:
    """Both signature schemes over the same body and timestamp: Standard Webhooks, and the
    deprecated ``Scrapejobs-Signature`` kept one release (docs/webhooks.md)."""
    t = int(time.time()) if timestamp is None else timestamp
    return {
        SIGNATURE_HEADER: signature_header(secret=claimed.secrets, body=body, timestamp=t),
        "Scrapejobs-Delivery": str(claimed.id),
        # The delivery's id: the same on every retry and redelivery, so receivers deduplicate.
        **standard_headers(secrets=claimed.secrets, msg_id=str(claimed.id), body=body, timestamp=t),
    }


def _post(claimed: ClaimedDelivery) -> PostOutcome:
    body = claimed.body.encode()
    return webhook_post(url=claimed.url, body=body, headers=delivery_headers(claimed=claimed, body=body))


def webhooks_deliver_due(
    *, budget_s: float = 20.0, concurrency: int | None = None, should_stop: Callable[[], bool] | None = None
) -> int:
    """Deliver due webhooks for up to about ``budget_s`` seconds; returns attempts made.

    Up to ``concurrency`` calls are in flight, in threads that do only the HTTP call; this thread
    claims and records, so database connections stay with the task's thread. A slot is refilled
    as soon as its call ends, not when a whole round has (one slow receiver held every other
    call back for up to its timeout), and a tenant holds at most half the slots
    (``SCRAPEJOBS_WEBHOOK_TENANT_CONCURRENCY``): a dead receiver with a backlog of due deliveries
    leaves the other tenants theirs. A call that overruns its bound is recorded as timed out and
    its thread's late answer is dropped."""
    conc = concurrency or settings.SCRAPEJOBS_WEBHOOK_CONCURRENCY
    per_tenant = min(conc, settings.SCRAPEJOBS_WEBHOOK_TENANT_CONCURRENCY or max(1, conc // 2))
    bound = settings.SCRAPEJOBS_WEBHOOK_TIMEOUT_S + 2
    deadline = time.monotonic() + budget_s
    made = 0
    pool = ThreadPoolExecutor(max_workers=conc, thread_name_prefix="webhook")
    # Each call in flight: its delivery, when it started (the record's time) and its bound.
    flying: dict[Future[PostOutcome], tuple[ClaimedDelivery, datetime, float]] = {}
    try:
        while True:
            if time.monotonic() < deadline and not (should_stop and should_stop()):
                _refill(pool, flying, conc=conc, per_tenant=per_tenant, bound=bound)
            if not flying:
                break
            soonest = min(until for _, _, until in flying.values())
            # Back at the first call's end, its bound, or shortly to claim what became due.
            done, _ = wait(
                flying, timeout=max(0.0, min(soonest - time.monotonic(), 0.5)), return_when=FIRST_COMPLETED
            )
            now = time.monotonic()
            for future in [f for f, (_, _, until) in flying.items() if f in done or now >= until]:
                c, started_at, _ = flying.pop(future)
                outcome = (
                    future.result()
                    if future in done
                    else PostOutcome(None, int(bound * 1000), f"timed out after {bound:g}s")
                )
                webhook_attempt_record(
                    delivery_id=c.id, attempt=c.attempt, started_at=started_at, outcome=outcome
                )
                made += 1
    finally:
        # Do not wait for an overrunning call's thread: its socket is shut by its own timer.
        pool.shutdown(wait=False, cancel_futures=True)
    return made


def _refill(
    pool: ThreadPoolExecutor,
    flying: dict[Future[PostOutcome], tuple[ClaimedDelivery, datetime, float]],
    *,
    conc: int,
    per_tenant: int,
    bound: float,
) -> None:
    """Claim and start calls until the slots are full or nothing more is due, one at a time so
    that no tenant goes past ``per_tenant`` calls in flight."""
    while len(flying) < conc:
        busy = Counter(c.tenant_id for c, _, _ in flying.values() if c.tenant_id is not None)
        full = [tenant for tenant, n in busy.items() if n >= per_tenant]
        claimed = webhook_deliveries_claim_due(limit=1, skip_tenants=full)
        if not claimed:
            return
        for c in claimed:
            flying[pool.submit(_post, c)] = (c, timezone.now(), time.monotonic() + bound)


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
