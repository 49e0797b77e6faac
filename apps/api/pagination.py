"""The cursor of a paged list: opaque to callers, the last id of the page inside.

Ids are UUIDv7 (time-ordered), so the id alone says where the next page starts; the selector
takes it as ``before``.
"""

from __future__ import annotations

import base64
import binascii
import uuid

# What cursor_encode gives: 16 bytes, base64url without padding. The document states it (FR-24), so
# a client or a fuzzer builds only cursors cursor_decode reads.
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{22}$"


class BadCursor(ValueError):
    pass


def cursor_encode(job_id: uuid.UUID) -> str:
    """The last id of the page, base64url without padding."""
    return base64.urlsafe_b64encode(job_id.bytes).rstrip(b"=").decode("ascii")


def cursor_decode(cursor: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise BadCursor(cursor) from None
    if len(raw) != 16:
        raise BadCursor(cursor)
    return uuid.UUID(bytes=raw)
