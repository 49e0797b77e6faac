"""Per-token rate limit: a token bucket in Redis, shared by every web process (FR-1 to FR-7).

It fails open: when Redis does not answer within ``FAIL_OPEN_TIMEOUT_S`` the request is let
through (NFR-1: accepting a job depends only on PostgreSQL), a warning is logged at most every
10 s, and Redis is left alone for ``_PAUSE_AFTER_FAILURE_S`` so that an outage costs each request
nothing rather than a timeout each. An operator who would rather refuse than serve unlimited sets
``SCRAPEJOBS_RATE_LIMIT_FAIL_CLOSED``: then a request the limit cannot check is a 429 with
``Retry-After: 1``.

The bucket keeps time by Redis's clock (``TIME`` inside the script), never a web host's: with two
web hosts a few seconds apart, their own clocks would refill a bucket too much or not at all.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from typing import Any

import redis
from django.conf import settings
from redis.commands.core import Script
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from apps.redis_clients import WarnEvery, fail_open_redis, fail_open_redis_async

logger = logging.getLogger(__name__)
_warn = WarnEvery(logger)
_PAUSE_AFTER_FAILURE_S = 1.0
# Hash token id -> unix time of its last request, written by the bucket script, emptied into
# ApiToken.last_used_at by beat (apps/tenants/services.py, ``tokens_last_used_flush``).
TOKENS_LAST_USED_KEY = "sj:tok:used"
_redis_down_until = 0.0

# KEYS[1] bucket, KEYS[2] the tokens' last use (TOKENS_LAST_USED_KEY); ARGV: rate/s, burst, token
# id ('' for an address's bucket). Returns {allowed, wait_seconds*1000}.
# Refill and take in one script so that concurrent requests cannot both spend the last token. The
# token's last use rides in the same round trip (FR-36): a request pays nothing more for it.
_BUCKET = """
local rate = tonumber(ARGV[1]); local burst = tonumber(ARGV[2])
local t = redis.call('TIME'); local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local ts = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local allowed = 0; local wait = 0
if tokens >= 1 then tokens = tokens - 1; allowed = 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
if ARGV[3] ~= '' then redis.call('HSET', KEYS[2], ARGV[3], math.floor(now)) end
return {allowed, math.ceil(wait * 1000)}
"""


@functools.cache
def _bucket_script(client: redis.Redis) -> Script:
    return client.register_script(_BUCKET)


# (bucket key, rate/s, burst, token id or '': whose last use the take records).
Bucket = tuple[str, float, int, str]


def _bucket_of(principal: Any) -> Bucket | None:
    """The bucket of the principal's token, None when it has no limit (and then its last use is
    not recorded either: docs/tokens.md)."""
    token = getattr(principal, "token", None)
    if token is None:
        return None
    rate = principal.tenant.rate_limit_per_second or settings.SCRAPEJOBS_RATE_LIMIT_PER_SECOND
    if rate <= 0:
        return None
    return f"sj:rl:{token.pk}", rate, max(settings.SCRAPEJOBS_RATE_LIMIT_BURST, 1), str(token.pk)


def token_rate_take(principal: Any) -> tuple[bool, float]:
    """Spend one request of the principal's token: ``(allowed, seconds until the next one)``.
    Tokens without a limit (rate 0) pass; a Redis failure lets the request pass too, or, with
    SCRAPEJOBS_RATE_LIMIT_FAIL_CLOSED, refuses it for a second."""
    return _bucket_take(_bucket_of(principal))


def address_rate_take(address: str) -> tuple[bool, float]:
    """``token_rate_take`` for what needs no token, per client address
    (SCRAPEJOBS_OPEN_RATE_LIMIT_PER_SECOND; 0: no limit)."""
    rate = settings.SCRAPEJOBS_OPEN_RATE_LIMIT_PER_SECOND
    if rate <= 0:
        return True, 0.0
    return _bucket_take(
        (f"sj:rl:addr:{address}", rate, max(settings.SCRAPEJOBS_OPEN_RATE_LIMIT_BURST, 1), "")
    )


def _bucket_take(bucket: Bucket | None) -> tuple[bool, float]:
    if bucket is None:
        return True, 0.0
    if time.monotonic() < _redis_down_until:
        return _unchecked()
    key, rate, burst, token_id = bucket
    client = fail_open_redis()
    try:
        allowed, wait_ms = _bucket_script(client)(
            keys=[key, TOKENS_LAST_USED_KEY], args=[rate, burst, token_id], client=client
        )
    except redis.RedisError as exc:
        return _failed(exc)
    return bool(int(allowed)), int(wait_ms) / 1000.0


async def token_rate_take_async(principal: Any) -> tuple[bool, float]:
    """``token_rate_take`` for the event loop (apps/query/fast_read.py): the script's round trip
    is awaited, so a slow Redis holds up this request only (NFR-21)."""
    bucket = _bucket_of(principal)
    if bucket is None:
        return True, 0.0
    if time.monotonic() < _redis_down_until:
        return _unchecked()
    key, rate, burst, token_id = bucket
    client = fail_open_redis_async()
    try:
        allowed, wait_ms = await client.register_script(_BUCKET)(
            keys=[key, TOKENS_LAST_USED_KEY], args=[rate, burst, token_id], client=client
        )
    except redis.RedisError as exc:
        return _failed(exc)
    return bool(int(allowed)), int(wait_ms) / 1000.0


def _failed(exc: Exception) -> tuple[bool, float]:
    global _redis_down_until
    _redis_down_until = time.monotonic() + _PAUSE_AFTER_FAILURE_S
    if settings.SCRAPEJOBS_RATE_LIMIT_FAIL_CLOSED:
        _warn("rate limit not checked: Redis unreachable (%s); requests are refused (fail closed)", exc)
    else:
        _warn("rate limit not applied: Redis unreachable (%s); requests pass unlimited", exc)
    return _unchecked()


def _unchecked() -> tuple[bool, float]:
    """The answer when the limit cannot be checked: pass (fail open, the default) or refuse
    for a second (SCRAPEJOBS_RATE_LIMIT_FAIL_CLOSED)."""
    return (False, 1.0) if settings.SCRAPEJOBS_RATE_LIMIT_FAIL_CLOSED else (True, 0.0)


class TokenRateThrottle(BaseThrottle):
    def allow_request(self, request: Request, view: Any) -> bool:
        allowed, self._wait = token_rate_take(getattr(request, "user", None))
        return allowed

    def wait(self) -> float | None:
        return max(1.0, math.ceil(getattr(self, "_wait", 1.0)))


class AddressRateThrottle(TokenRateThrottle):
    """For the pages that need no token: a bucket per client address (``get_ident``: the
    connection's, or the forwarded one behind REST_FRAMEWORK's NUM_PROXIES trusted proxies)."""

    def allow_request(self, request: Request, view: Any) -> bool:
        allowed, self._wait = address_rate_take(self.get_ident(request))
        return allowed
