"""The webhook deliverer (FR-1 to FR-7, FR-23, docs/webhooks.md): claim due deliveries, make the
calls outside any transaction, record each attempt and plan the next.

2. ``webhook_deliveries_claim_due``: a deliverer claims due deliveries (SKIP LOCKED) and pushes
   their due time out by a short lease, so a deliverer that dies mid-call only delays them.
3. ``webhook_post`` (apps/webhooks/sending.py) makes the call, outside any transaction.
4. ``webhook_attempt_record`` logs the attempt and plans the next one, fenced on the attempt
   number: a deliverer whose claim lease ran out cannot overwrite a newer attempt.

Step 1, the deliveries themselves, is apps/webhooks/services.py's.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.jobs.selectors import jobs_webhook_secrets
from apps.tenants.selectors import tenants_webhook_secrets
from apps.webhooks.models import DeliveryStatus, DisabledCallback, WebhookAttempt, WebhookDelivery
from apps.webhooks.sending import PostOutcome, webhook_post
from apps.webhooks.services import SKIPPED_NOTE, url_digest
from apps.webhooks.signing import SIGNATURE_HEADER, signature_header, standard_headers

# How long a claimed delivery stays invisible to other deliverers: one call's bound plus margin.
CLAIM_MARGIN_S = 30.0
JITTER = 0.2

# Uses the partial index webhooks_pending_by_due.
_CLAIM_DUE_SQL = """
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
"""


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
        cur.execute(_CLAIM_DUE_SQL, [now, list(skip_tenants), limit, lease_until])
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
