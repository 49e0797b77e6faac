"""Signed local result links: ``/results/<token>``, served by ``apps.results.views``.

The token is a Django-signed (HMAC with SECRET_KEY, its own salt) payload carrying the storage
key, the content type to serve it with and the expiry. It needs no database read and no API
token, and it cannot be altered to name another key or a later expiry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.core import signing

_SALT = "scrapejobs.results.link"


class LinkInvalid(Exception):
    """Not a token we signed (tampered, truncated, or signed with another key)."""


class LinkExpired(Exception):
    """A token we signed whose expiry has passed."""


@dataclass(frozen=True)
class LinkGrant:
    key: str
    content_type: str | None
    expires_at: float  # Unix seconds


def link_token_make(*, key: str, content_type: str | None, expires_at: float) -> str:
    return signing.dumps({"k": key, "ct": content_type, "e": int(expires_at)}, salt=_SALT, compress=True)


def link_token_read(token: str, *, now: float | None = None) -> LinkGrant:
    try:
        payload = signing.loads(token, salt=_SALT)
        grant = LinkGrant(
            key=str(payload["k"]), content_type=payload.get("ct"), expires_at=float(payload["e"])
        )
    except (signing.BadSignature, KeyError, TypeError, ValueError) as e:
        raise LinkInvalid(str(e)) from e
    if grant.expires_at <= (time.time() if now is None else now):
        raise LinkExpired(f"link expired at {grant.expires_at:.0f}")
    return grant
