"""Webhook signatures: ``Scrapejobs-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "t.body")>``.

The timestamp is inside the signed text so a receiver can refuse replays older than a few
minutes; ``signature_verify`` is what a receiver does (and what the tests do).
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "Scrapejobs-Signature"


def signature_compute(*, secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(*, secret: str, body: bytes, timestamp: int | None = None) -> str:
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={signature_compute(secret=secret, timestamp=t, body=body)}"


def signature_verify(
    *, secret: str, header: str, body: bytes, tolerance_s: float = 300, now: float | None = None
) -> bool:
    """True when ``header`` signs ``body`` under ``secret`` and its timestamp is within
    ``tolerance_s`` of ``now``. Compares in constant time."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        t = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - t) > tolerance_s:
        return False
    expected = signature_compute(secret=secret, timestamp=t, body=body)
    return hmac.compare_digest(expected, parts.get("v1", ""))
