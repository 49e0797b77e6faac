"""Process-wide Redis clients.

Two logical databases on one server: ``REDIS_URL`` holds the service's own state (write receipts,
cancel flags, rate-limit buckets, the writer lease) and the Celery broker uses
``CELERY_BROKER_URL`` (by default the same server, next database). Losing every broker message
(FLUSHDB of the broker database) therefore loses no receipt.
"""

from __future__ import annotations

import functools

import redis
from django.conf import settings


@functools.cache
def state_redis() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL,
        decode_responses=True,
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=30,
        retry_on_timeout=True,
    )


def cancel_flag_key(job_id: str) -> str:
    return f"sj:cancel:{job_id}"
