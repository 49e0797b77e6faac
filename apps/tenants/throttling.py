"""Per-token rate limit: a token bucket in Redis, shared by every web process (contract 2)."""

from __future__ import annotations

import math
import time
from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from apps.jobs.redis import state_redis

# KEYS[1] bucket; ARGV: rate/s, burst, now (s, float). Returns {allowed, wait_seconds*1000}.
# Refill and take in one script so that concurrent requests cannot both spend the last token.
_BUCKET = """
local rate = tonumber(ARGV[1]); local burst = tonumber(ARGV[2]); local now = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local ts = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local allowed = 0; local wait = 0
if tokens >= 1 then tokens = tokens - 1; allowed = 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {allowed, math.ceil(wait * 1000)}
"""


class TokenRateThrottle(BaseThrottle):
    _script: Any = None

    def allow_request(self, request: Request, view: Any) -> bool:
        principal = getattr(request, "user", None)
        token = getattr(principal, "token", None)
        if token is None:
            return True
        rate = principal.tenant.rate_limit_per_second or settings.SCRAPEJOBS_RATE_LIMIT_PER_SECOND  # type: ignore[union-attr]
        if rate <= 0:
            return True
        burst = max(settings.SCRAPEJOBS_RATE_LIMIT_BURST, 1)
        if TokenRateThrottle._script is None:
            TokenRateThrottle._script = state_redis().register_script(_BUCKET)
        allowed, wait_ms = TokenRateThrottle._script(
            keys=[f"sj:rl:{token.pk}"], args=[rate, burst, time.time()]
        )
        self._wait = int(wait_ms) / 1000.0
        return bool(int(allowed))

    def wait(self) -> float | None:
        return max(1.0, math.ceil(getattr(self, "_wait", 1.0)))
