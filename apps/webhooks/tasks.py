"""Webhook tasks. Thin: each calls one service. Cadences are in scrapejobs/celery.py."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from redis.exceptions import LockError

from apps.redis_clients import state_redis
from apps.runtime.shutdown import worker_is_stopping
from apps.tenants.services import webhook_secrets_drop_expired as _webhook_secrets_drop_expired
from apps.webhooks.delivering import webhooks_deliver_due as _webhooks_deliver_due
from apps.webhooks.services import webhooks_enqueue_final as _webhooks_enqueue_final

# One deliverer at a time: a slow callback can then hold one thread of the process that runs the
# `webhooks` queue (the writer, next to the publisher and sweeper), never all of them.
DELIVERER_LOCK = "sj:webhooks:deliverer"
DELIVER_BUDGET_S = 20.0


@shared_task(
    name="apps.webhooks.tasks.webhooks_enqueue_final", queue="control", soft_time_limit=50, time_limit=60
)
def webhooks_enqueue_final() -> int:
    return _webhooks_enqueue_final()


@shared_task(
    name="apps.webhooks.tasks.webhooks_deliver_due", queue="webhooks", soft_time_limit=90, time_limit=120
)
def webhooks_deliver_due() -> int:
    lock = state_redis().lock(
        DELIVERER_LOCK, timeout=DELIVER_BUDGET_S + settings.SCRAPEJOBS_WEBHOOK_TIMEOUT_S + 30, blocking=False
    )
    if not lock.acquire():
        return 0  # another run is delivering; beat sends the next tick in a second
    try:
        # A stopping worker finishes the calls in flight and claims no more.
        return _webhooks_deliver_due(budget_s=DELIVER_BUDGET_S, should_stop=worker_is_stopping)
    finally:
        try:
            lock.release()
        except LockError:
            pass  # it expired; the claims in the database kept runs apart anyway


@shared_task(
    name="apps.webhooks.tasks.webhook_secrets_drop_expired",
    queue="control",
    soft_time_limit=50,
    time_limit=60,
)
def webhook_secrets_drop_expired() -> int:
    return _webhook_secrets_drop_expired()
