"""The web process's application: Django under an ASGI server (gunicorn managing uvicorn
workers, scrapejobs/processes.py).

ASGI so that ``GET /jobs/{id}?wait=N`` waits as an asyncio task holding neither a thread nor a
database connection (apps/query/waiting.py); every other view is synchronous and Django runs it
in a thread of its own per request, with the same pooled connections as before.

Request bodies are bounded here, on every path (the admin's and the dashboard's too), before
Django sees them (NFR-19, NFR-33, docs/limits.md): Django's ASGI handler reads a whole body into a
temporary file before any middleware runs, so a bound in middleware would come after a client had
streamed any amount of it to the disk. A body is refused unread when its declared length, the
path's methods (405) or the missing token (401) rule it out; one still arriving
``SCRAPEJOBS_REQUEST_BODY_TIMEOUT_S`` after its headers is cut with 408. A batch is written once,
as it arrives, to its spool file, charged to its tenant's share of spool space in flight
(``SpoolQuota``, scrapejobs/bodies.py): past it, 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Mapping
from typing import Any

import django
from asgiref.sync import sync_to_async
from django.urls import Resolver404, get_resolver

from apps.runtime.logs import secrets_masked
from apps.tracing import tracing_start

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
# One trace per job (FR-29, docs/tracing.md): before the handler below loads its middleware, so
# that Django's instrumentation is in it; with tracing off nothing of OpenTelemetry is imported.
tracing_start(component="web", instrument=("django", "psycopg", "redis", "urllib3"), url_mask=secrets_masked)
django.setup(set_prefix=False)

from django.db import connection  # noqa: E402

from apps.api.paths import API_PATH_PREFIX  # noqa: E402
from apps.operators.checks import refuse_insecure_start  # noqa: E402
from apps.query.fast_read import answer_from_cache  # noqa: E402
from apps.tenants.models import TokenScope  # noqa: E402
from apps.tenants.services import token_authenticate  # noqa: E402
from scrapejobs.bodies import (  # noqa: E402
    BATCH_TENANT,
    BoundedBodyHandler,
    Message,
    Receive,
    Scope,
    Send,
    body_limit,
    has_header,
    header_value,
    send_django_response,
    with_length,
)
from scrapejobs.middleware import BATCHES_PATH, too_large_response  # noqa: E402

django_application = BoundedBodyHandler()


def _has_body(scope: Scope) -> bool:
    return _declared_length(scope) is not None or has_header(scope, b"transfer-encoding")


def _method_refused(scope: Scope) -> bool:
    """Whether the API view at the path has no handler for the method: it will be 405 (or
    401 first, without a token), so its body is not read."""
    path = scope["path"]
    if not path.startswith(API_PATH_PREFIX):
        return False
    try:
        match = get_resolver().resolve(path)
    except Resolver404:
        return False
    view_class = getattr(match.func, "view_class", None) or getattr(match.func, "cls", None)
    if view_class is None:
        return False
    method = scope["method"].lower()
    return method not in view_class.http_method_names or not hasattr(view_class, method)


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """Django, behind the body bound; a plain cached read answered before it
    (apps/query/fast_read.py); POST /batches authenticated before its body is taken."""
    if scope["type"] != "http":
        await django_application(scope, receive, send)
        return
    path, method = scope["path"], scope["method"]
    limit = body_limit(path, method)
    declared = _declared_length(scope)
    if declared is not None and declared > limit:
        # Refused unread: the connection is closed after the answer, so nothing more is taken.
        await send_django_response(send, too_large_response(path=path, limit=limit), close=True)
        return
    cached = await answer_from_cache(scope)
    if cached is not None:
        await send_django_response(send, cached)
        return
    if _has_body(scope) and path.startswith(API_PATH_PREFIX):
        if not _bearer(scope) or _method_refused(scope):
            # Every API call needs a token, and a method the path does not take is a 405: DRF's
            # answer (401 first, then 405), given the request without its body, which is never read.
            await django_application(_without_body(scope), _no_body(), _closing(send))
            return
    if path == BATCHES_PATH and method == "POST":
        tenant = await _batch_tenant(scope)
        if tenant is None:
            # A batch may be hundreds of MB: a caller without a valid token gets its 401 (DRF's,
            # from the view), one with a read token its 403, before any of it is read.
            await django_application(_without_body(scope), _no_body(), _closing(send))
            return
        scope = {**scope, BATCH_TENANT: tenant}
    await django_application(scope, receive, send)


def _bearer(scope: Scope) -> str:
    scheme, _, raw = header_value(scope, b"authorization").decode("latin-1").partition(" ")
    return raw.strip() if scheme.lower() == "bearer" else ""


async def _batch_tenant(scope: Scope) -> Any:
    """The id of the tenant a valid write token names, None without one."""
    raw = _bearer(scope)
    return await _authenticate(raw) if raw else None


@sync_to_async(thread_sensitive=False)
def _authenticate(raw: str) -> Any:
    try:
        # A read token may not submit a batch (FR-36): refused, as without a token, unread.
        found = token_authenticate(raw=raw)
        if found is None or found[1].scope == TokenScope.READ:
            return None
        return found[0].id
    finally:
        if not connection.in_atomic_block:  # back to the pool (a test's transaction is the test's)
            connection.close()


def _declared_length(scope: Scope) -> int | None:
    """The Content-Length, None without one (or a zero one); the ASGI server has already
    refused a malformed one."""
    value = header_value(scope, b"content-length")
    try:
        return int(value) or None
    except ValueError:
        return None


def _without_body(scope: Scope) -> Scope:
    return with_length(scope, 0)


def _no_body() -> Receive:
    """A receive for a request answered without its body: an empty body, then nothing (Django's
    disconnect listener waits until it is cancelled, once the answer is sent)."""
    given = False

    async def receive() -> Message:
        nonlocal given
        if given:
            await asyncio.Event().wait()
        given = True
        return {"type": "http.request", "body": b"", "more_body": False}

    return receive


def _closing(send: Send) -> Send:
    """A send that asks the server to close the connection after the answer: the unread rest of
    the body is never taken."""

    async def closing(message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await send(message)

    return closing


refuse_insecure_start()  # no web with a public secret key, outside development (DJANGO_DEBUG)

# As in scrapejobs/wsgi.py: load the URLconf and every view module now, then take what
# is loaded out of the garbage collector's sight, so a full collection does not stall requests.
get_resolver().url_patterns  # noqa: B018 - the import is the point
gc.freeze()
