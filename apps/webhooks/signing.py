"""Webhook signatures (FR-7, FR-23; docs/webhooks.md).

Every delivery carries two schemes:

- Standard Webhooks 1.0: ``webhook-id`` (the delivery's id, the same on every retry),
  ``webhook-timestamp`` (Unix seconds) and ``webhook-signature: v1,<base64 HMAC-SHA256 of
  "{id}.{timestamp}.{body}">``, one ``v1,...`` per signing secret, space-separated. The HMAC key
  is the decoded bytes of the secret (``whsec_`` + standard base64), as the specification says,
  so ``standardwebhooks.Webhook(secret).verify(body, headers)`` accepts it.
- The deprecated ``Scrapejobs-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`` (kept one
  release), keyed on the secret as it was first shown: ``whsec_`` + URL-safe base64 without
  padding of the same bytes (``secret_legacy_form``), one ``v1=`` per signing secret.

The timestamp is inside the signed text so a receiver can refuse replays older than a few minutes;
``signature_verify`` / ``standard_signature_verify`` are what a receiver does (and the tests do).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence

SIGNATURE_HEADER = "Scrapejobs-Signature"
ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
STANDARD_SIGNATURE_HEADER = "webhook-signature"
SECRET_PREFIX = "whsec_"


def secret_bytes(secret: str) -> bytes:
    """The key bytes of a secret in either form (standard or URL-safe base64 after ``whsec_``)."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    padded = encoded + "=" * (-len(encoded) % 4)
    try:
        return base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        # Not base64 at all (a hand-made secret): its text is the key, as it always was.
        return secret.encode()


def secret_standard_form(raw: bytes) -> str:
    """``whsec_`` + standard base64: the form the Standard Webhooks libraries take."""
    return SECRET_PREFIX + base64.b64encode(raw).decode()


def secret_legacy_form(secret: str) -> str:
    """The text the deprecated ``Scrapejobs-Signature`` is keyed on: the secret as it was shown
    before the Standard Webhooks form (``whsec_`` + URL-safe base64, no padding)."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    if not encoded or secret_bytes(secret) == secret.encode():
        return secret
    return SECRET_PREFIX + base64.urlsafe_b64encode(secret_bytes(secret)).rstrip(b"=").decode()


# --- Standard Webhooks ---------------------------------------------------------------------


def standard_signature_compute(*, secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def standard_headers(
    *, secrets: Sequence[str], msg_id: str, body: bytes, timestamp: int | None = None
) -> dict[str, str]:
    t = int(time.time()) if timestamp is None else timestamp
    signatures = " ".join(
        standard_signature_compute(secret=s, msg_id=msg_id, timestamp=t, body=body) for s in secrets
    )
    return {ID_HEADER: msg_id, TIMESTAMP_HEADER: str(t), STANDARD_SIGNATURE_HEADER: signatures}


def standard_signature_verify(
    *,
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance_s: float = 300,
    now: float | None = None,
) -> bool:
    """True when one of the ``v1,`` signatures of ``headers`` signs ``body`` under ``secret``
    and the timestamp is within ``tolerance_s`` of ``now``. Compares in constant time."""
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        msg_id, t = lower[ID_HEADER], int(lower[TIMESTAMP_HEADER])
        given = lower[STANDARD_SIGNATURE_HEADER].split()
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - t) > tolerance_s:
        return False
    expected = standard_signature_compute(secret=secret, msg_id=msg_id, timestamp=t, body=body)
    return any(hmac.compare_digest(expected, sig) for sig in given)


# --- Scrapejobs-Signature (deprecated) -----------------------------------------------------


def signature_compute(*, secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret_legacy_form(secret).encode(), signed, hashlib.sha256).hexdigest()


def signature_header(*, secret: str | Sequence[str], body: bytes, timestamp: int | None = None) -> str:
    t = int(time.time()) if timestamp is None else timestamp
    keys = [secret] if isinstance(secret, str) else list(secret)
    return f"t={t}," + ",".join(f"v1={signature_compute(secret=s, timestamp=t, body=body)}" for s in keys)


def signature_verify(
    *, secret: str, header: str, body: bytes, tolerance_s: float = 300, now: float | None = None
) -> bool:
    """True when one ``v1=`` of ``header`` signs ``body`` under ``secret`` and its timestamp is
    within ``tolerance_s`` of ``now``. Compares in constant time."""
    try:
        items = [tuple(item.split("=", 1)) for item in header.split(",") if "=" in item]
        t = int(next(v for k, v in items if k == "t"))
    except (StopIteration, ValueError):
        return False
    if abs((time.time() if now is None else now) - t) > tolerance_s:
        return False
    expected = signature_compute(secret=secret, timestamp=t, body=body)
    return any(k == "v1" and hmac.compare_digest(expected, v) for k, v in items)
