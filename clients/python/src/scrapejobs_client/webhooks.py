"""Verifying a scrapejobs webhook delivery in a receiver (docs/webhooks.md).

``verify(secret, body, headers)`` accepts both header schemes while the old one is deprecated:
Standard Webhooks 1.0 (``webhook-id``, ``webhook-timestamp``, ``webhook-signature``) when present,
else ``Scrapejobs-Signature``. ``secret`` is the tenant's ``whsec_…`` secret, in either form it
was shown (standard base64 now, URL-safe base64 before). Returns the parsed event.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from scrapejobs_client.errors import ScrapejobsError

PREFIX = "whsec_"


class WebhookVerificationError(ScrapejobsError):
    """The delivery is not signed by this secret, is malformed, or is too old (a replay)."""


def _key(secret: str) -> bytes:
    encoded = secret.removeprefix(PREFIX)
    padded = encoded + "=" * (-len(encoded) % 4)
    try:
        return base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return secret.encode()


def _legacy_text(secret: str) -> str:
    """The secret's text the deprecated header is keyed on: its URL-safe form."""
    key = _key(secret)
    if key == secret.encode():
        return secret
    return PREFIX + base64.urlsafe_b64encode(key).rstrip(b"=").decode()


def _same(expected: str, given: str) -> bool:
    """A constant-time comparison of any header text: ``compare_digest`` raises TypeError on a
    non-ASCII ``str``, which a forged header can be; compared as UTF-8 bytes it is simply wrong."""
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogateescape"))


def _fresh(timestamp: int, tolerance_s: float, now: float | None) -> None:
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        raise WebhookVerificationError("timestamp outside the tolerance (a replay, or a skewed clock)")


def verify(
    secret: str,
    body: bytes | str,
    headers: Mapping[str, str],
    *,
    tolerance_s: float = 300,
    now: float | None = None,
) -> dict[str, Any]:
    """The delivery's event ``{id, status, finished_at}`` if ``headers`` sign ``body`` under
    ``secret`` within ``tolerance_s`` of now; raises WebhookVerificationError otherwise."""
    raw = body.encode() if isinstance(body, str) else bytes(body)
    lower = {k.lower(): v for k, v in headers.items()}
    if "webhook-signature" in lower:
        try:
            msg_id, timestamp = lower["webhook-id"], int(lower["webhook-timestamp"])
        except (KeyError, ValueError) as exc:
            raise WebhookVerificationError("missing or malformed webhook-id / webhook-timestamp") from exc
        _fresh(timestamp, tolerance_s, now)
        mac = hmac.new(_key(secret), f"{msg_id}.{timestamp}.".encode() + raw, hashlib.sha256).digest()
        expected = base64.b64encode(mac).decode()
        given = [s.split(",", 1)[1] for s in lower["webhook-signature"].split() if s.startswith("v1,")]
        ok = any(_same(expected, g) for g in given)
    elif "scrapejobs-signature" in lower:
        items = [tuple(x.split("=", 1)) for x in lower["scrapejobs-signature"].split(",") if "=" in x]
        try:
            timestamp = int(next(v for k, v in items if k == "t"))
        except (StopIteration, ValueError) as exc:
            raise WebhookVerificationError("malformed Scrapejobs-Signature") from exc
        _fresh(timestamp, tolerance_s, now)
        expected = hmac.new(
            _legacy_text(secret).encode(), f"{timestamp}.".encode() + raw, hashlib.sha256
        ).hexdigest()
        ok = any(k == "v1" and _same(expected, v) for k, v in items)
    else:
        raise WebhookVerificationError("no webhook-signature or Scrapejobs-Signature header")
    if not ok:
        raise WebhookVerificationError("no signature matches this secret")
    try:
        event: dict[str, Any] = json.loads(raw)
    except ValueError as exc:
        raise WebhookVerificationError("the body is not JSON") from exc
    return event
