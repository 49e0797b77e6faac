"""The web process's application: Django under an ASGI server (gunicorn managing uvicorn
workers, scrapejobs/processes.py).

ASGI so that ``GET /jobs/{id}?wait=N`` waits as an asyncio task holding neither a thread nor a
database connection (apps/query/waiting.py); every other view is synchronous and Django runs it
in a thread of its own per request, with the same pooled connections as before.

Request bodies are bounded here, on every path (the admin's and the dashboard's too), before
Django sees them (NFR-19, docs/limits.md): Django's ASGI handler reads a whole body into a
temporary file before any middleware runs, so a bound in middleware would come after a client had
streamed any amount of it to the disk.
"""

import asyncio
import gc
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import django
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.urls import get_resolver

from apps.runtime.logs import secrets_masked
from apps.tracing import tracing_start

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
# One trace per job (FR-29, docs/tracing.md): before the handler below loads its middleware, so
# that Django's instrumentation is in it; with tracing off nothing of OpenTelemetry is imported.
tracing_start(component="web", instrument=("django", "psycopg", "redis", "urllib3"), url_mask=secrets_masked)
django.setup(set_prefix=False)

from django.conf import settings  # noqa: E402 - after Django is set up
from django.db import connection  # noqa: E402

from apps.operators.checks import refuse_insecure_start  # noqa: E402
from apps.query.fast_read import answer_from_cache  # noqa: E402
from apps.tenants.models import TokenScope  # noqa: E402
from apps.tenants.services import token_authenticate  # noqa: E402
from scrapejobs.middleware import BATCHES_PATH, too_large_response  # noqa: E402

Scope = dict[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]


class BodyTooLarge(Exception):
    """The body went past its path's limit while it was being read."""

    def __init__(self, *, path: str, limit: int):
        super().__init__(f"{path}: body over {limit} bytes")
        self.path, self.limit = path, limit


class _CountedBody:
    """The server's ``receive``, counting body bytes: one message past ``limit`` raises
    BodyTooLarge, so at most the limit plus one message (the server's read, 64 KiB for uvicorn)
    is ever taken from the client."""

    def __init__(self, receive: Receive, *, path: str, limit: int):
        self._receive, self._path, self._limit = receive, path, limit
        self.read = 0

    async def __call__(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            self.read += len(message.get("body", b""))
            if self.read > self._limit:
                raise BodyTooLarge(path=self._path, limit=self._limit)
        return message


class BoundedBodyHandler(ASGIHandler):
    """Django's ASGI handler, reading the body through ``_CountedBody`` (Django's own
    ``read_body``: a file in memory up to FILE_UPLOAD_MAX_MEMORY_SIZE, on disk past it, so a batch
    is never held in memory) and answering the documented 413 the moment it goes past its
    limit."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        limit = body_limit(path)
        try:
            await super().handle(scope, _CountedBody(receive, path=path, limit=limit), send)
        except BodyTooLarge as refused:
            await _send_django_response(
                send, too_large_response(path=refused.path, limit=refused.limit), close=True
            )

    def create_request(self, scope: Mapping[str, Any], body_file: Any) -> Any:
        # A chunked body comes without a Content-Length, which Django and DRF read as no body:
        # now that it is read (and bounded), it has a length.
        if not _has_length(scope):
            size = body_file.seek(0, os.SEEK_END)
            body_file.seek(0)
            if size:
                scope = _with_length(dict(scope), size)
        return super().create_request(scope, body_file)


django_application = BoundedBodyHandler()


def body_limit(path: str) -> int:
    """SCRAPEJOBS_BATCH_MAX_BYTES for POST /batches, SCRAPEJOBS_MAX_REQUEST_BYTES for every other
    path (docs/limits.md)."""
    return (
        settings.SCRAPEJOBS_BATCH_MAX_BYTES if path == BATCHES_PATH else settings.SCRAPEJOBS_MAX_REQUEST_BYTES
    )


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """Django, behind the body bound; a plain cached read answered before it
    (apps/query/fast_read.py); POST /batches authenticated before its body is taken."""
    if scope["type"] != "http":
        await django_application(scope, receive, send)
        return
    path = scope["path"]
    declared = _declared_length(scope)
    if declared is not None and declared > body_limit(path):
        # Refused unread: the connection is closed after the answer, so nothing more is taken.
        await _send_django_response(send, too_large_response(path=path, limit=body_limit(path)), close=True)
        return
    cached = await answer_from_cache(scope)
    if cached is not None:
        await _send_django_response(send, cached)
        return
    if path == BATCHES_PATH and scope["method"] == "POST" and not await _token_valid(scope):
        # A batch may be hundreds of MB: a caller without a valid token gets its 401 (DRF's,
        # from the view), one with a read token its 403, before any of it is read.
        await django_application(_without_body(scope), _no_body(), _closing(send))
        return
    await django_application(scope, receive, send)


async def _token_valid(scope: Scope) -> bool:
    scheme, _, raw = _header(scope, b"authorization").decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        return False
    return await _authenticate(raw.strip())


@sync_to_async(thread_sensitive=False)
def _authenticate(raw: str) -> bool:
    try:
        # A read token may not submit a batch (FR-36): refused, as without a token, unread.
        found = token_authenticate(raw=raw)
        return found is not None and found[1].scope != TokenScope.READ
    finally:
        if not connection.in_atomic_block:  # back to the pool (a test's transaction is the test's)
            connection.close()


def _header(scope: Scope, name: bytes) -> bytes:
    return next((v for n, v in scope["headers"] if n == name), b"")


def _has_header(scope: Mapping[str, Any], name: bytes) -> bool:
    return any(n == name for n, _ in scope["headers"])


def _has_length(scope: Mapping[str, Any]) -> bool:
    return _has_header(scope, b"content-length")


def _declared_length(scope: Scope) -> int | None:
    """The Content-Length, None without one (or a zero one); the ASGI server has already
    refused a malformed one."""
    value = _header(scope, b"content-length")
    try:
        return int(value) or None
    except ValueError:
        return None


def _with_length(scope: Scope, length: int) -> Scope:
    headers = [(n, v) for n, v in scope["headers"] if n not in (b"transfer-encoding", b"content-length")]
    return {**scope, "headers": [*headers, (b"content-length", str(length).encode())]}


def _without_body(scope: Scope) -> Scope:
    return _with_length(scope, 0)


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


async def _send_django_response(send: Send, response: Any, *, close: bool = False) -> None:
    headers = [(k.encode("latin1"), v.encode("latin1")) for k, v in response.items()]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})


refuse_insecure_start()  # no web with a public secret key, outside development (DJANGO_DEBUG)

# As in scrapejobs/wsgi.py: load the URLconf and every view module now, then take what
# is loaded out of the garbage collector's sight, so a full collection does not stall requests.
get_resolver().url_patterns  # noqa: B018 - the import is the point
gc.freeze()
