"""The last time the egress proxy refused its credentials (407), for ``/readyz`` (FR-28): a
worker that sees ``proxy_auth`` writes it to Redis, every web process's readiness answer shows it
for ``STATUS_TTL_S``. One Redis call per failed job of that kind, none otherwise."""

from __future__ import annotations

import json
import time

import redis

STATUS_KEY = "scrapejobs:egress:proxy_auth"
STATUS_TTL_S = 900


def egress_proxy_auth_failed_record(*, r: redis.Redis, error: str) -> None:
    """``error`` names the proxy masked (apps.outbound.proxies); it is shown as it is."""
    r.set(STATUS_KEY, json.dumps({"at": time.time(), "error": error[:300]}), ex=STATUS_TTL_S)


def egress_proxy_auth_failure_get(*, r: redis.Redis) -> str | None:
    """What ``/readyz`` says of the proxy: None when no 407 was seen in the last STATUS_TTL_S."""
    raw = r.get(STATUS_KEY)
    if raw is None:
        return None
    seen = json.loads(raw)
    ago = max(0, int(time.time() - float(seen["at"])))
    return f"error: proxy_auth {ago} s ago: {seen['error']}"
