"""The lean path of POST /jobs's validation (FR-1 to FR-7, "Field bounds"): the serializer's
answer for an ordinary body, without building the serializer.

JobCreateInput (apps/intake/serializers.py) is the specification and the source of every error
message, but building a DRF serializer (a deep copy of its fields) and running it costs more CPU
than the rest of a submit together (22% of intake's CPU in a py-spy profile).
``job_create_input_lean`` accepts exactly what the serializer accepts, with the same validated
data, and returns None for anything else so that the caller runs the serializer for its answer: a
lean path can only ever be too strict, never let through what the serializer refuses
(tests/intake/test_lean_validation.py checks both on every case of FR-1's bounds).
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers

from apps.intake.serializers import (
    INT_BOUNDS,
    MAX_HEADER_VALUE,
    MAX_URL_LENGTH,
    METHODS,
    PRIORITIES,
    headers_check,
    http_url_check,
)
from apps.jobs.models import Method, Priority

_LEAN_FIELDS = frozenset(
    ("url", "method", "headers", "body", "priority", "callback_url", "max_attempts", "timeout_s", "max_age_s")
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _plain_text(value: object, max_length: int | None = None) -> bool:
    """What StrictCharField takes: a string, no NUL, no lone surrogate, not too long."""
    return (
        isinstance(value, str)
        and (max_length is None or len(value) <= max_length)
        and "\0" not in value
        and (value.isascii() or not _SURROGATE.search(value))
    )


def _lean_url(value: object, what: str) -> bool:
    if not (_plain_text(value, MAX_URL_LENGTH) and value):
        return False
    try:
        http_url_check(value, what=what)  # type: ignore[arg-type]
    except serializers.ValidationError:
        return False
    return True


def job_create_input_lean(data: object) -> dict[str, Any] | None:
    """JobCreateInput's validated data for ``data`` when the serializer would accept it, else
    None (the serializer then says why)."""
    if not isinstance(data, dict) or not data.keys() <= _LEAN_FIELDS:
        return None
    url = data.get("url")
    if not _lean_url(url, "url"):
        return None
    method = data.get("method", Method.GET)
    priority = data.get("priority", Priority.NORMAL)
    if not (
        isinstance(method, str) and method in METHODS and isinstance(priority, str) and priority in PRIORITIES
    ):
        return None
    headers = data.get("headers", {})
    if not isinstance(headers, dict) or not all(_plain_text(v, MAX_HEADER_VALUE) for v in headers.values()):
        return None
    try:
        headers_check(headers)
    except serializers.ValidationError:
        return None
    body = data.get("body")
    if body is not None and not (_plain_text(body) and method == Method.POST):
        return None
    callback_url = data.get("callback_url")
    if callback_url is not None and not _lean_url(callback_url, "callback_url"):
        return None
    validated: dict[str, Any] = {
        "url": url,
        "method": method,
        "headers": dict(headers),
        "body": body,
        "priority": priority,
        "callback_url": callback_url,
    }
    for name, (low, high, default) in INT_BOUNDS.items():
        value = data.get(name, default)
        if type(value) is not int or not low <= value <= high:
            return None
        validated[name] = value
    return validated
