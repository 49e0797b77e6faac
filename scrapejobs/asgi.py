"""The web process's application: Django under an ASGI server (gunicorn managing uvicorn
workers, scrapejobs/processes.py).

ASGI so that ``GET /jobs/{id}?wait=N`` waits as an asyncio task holding neither a thread nor a
database connection (apps/query/waiting.py); every other view is synchronous and Django runs it
in a thread of its own per request, with the same pooled connections as before.
"""

import gc
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.core.asgi import get_asgi_application
from django.urls import get_resolver

from apps.tracing import tracing_start

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
# One trace per job (FR-29, docs/tracing.md): before the application loads its middleware, so
# that Django's instrumentation is in it; with tracing off nothing of OpenTelemetry is imported.
tracing_start(component="web", instrument=("django", "psycopg", "redis", "urllib3"))
django_application = get_asgi_application()

from django.conf import settings  # noqa: E402 - after Django is set up

from apps.operators.checks import refuse_insecure_start  # noqa: E402
from apps.query.fast_read import answer_from_cache  # noqa: E402
from scrapejobs.middleware import BATCHES_PATH, too_large_response  # noqa: E402

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """Django, with an API request body of unknown length (chunked) bounded first.

    Django's ASGI handler reads a whole body before any middleware runs, so the body limit of
    scrapejobs/middleware.py would come after a client had streamed any amount (and the request
    would have no Content-Length, which DRF reads as no body). Here such a body is read up to
    SCRAPEJOBS_MAX_REQUEST_BYTES (SCRAPEJOBS_BATCH_MAX_BYTES for POST /batches): one byte more is a 413 at once; otherwise Django gets it whole,
    with its length. A body with a Content-Length is left to the middleware, which refuses it
    unread."""
    if scope["type"] != "http" or not scope["path"].startswith("/api/"):
        await django_application(scope, receive, send)
        return
    cached = answer_from_cache(scope)
    if cached is not None:  # a plain read of a job the cache holds (apps/query/fast_read.py)
        await _send_django_response(send, cached)
        return
    if _has_length(scope):
        await django_application(scope, receive, send)
        return
    body = bytearray()
    # POST /batches has its own, larger limit (scrapejobs/middleware.py).
    batch = scope["path"] == BATCHES_PATH
    limit = settings.SCRAPEJOBS_BATCH_MAX_BYTES if batch else settings.SCRAPEJOBS_MAX_REQUEST_BYTES
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return  # the client went away
        body += message.get("body", b"")
        if len(body) > limit:
            await _send_django_response(send, too_large_response(path=scope["path"], limit=limit))
            return
        if not message.get("more_body", False):
            break
    await django_application(_with_length(scope, len(body)), _replay(bytes(body), receive), send)


def _has_length(scope: Scope) -> bool:
    return any(name == b"content-length" for name, _ in scope["headers"])


def _with_length(scope: Scope, length: int) -> Scope:
    headers = [(n, v) for n, v in scope["headers"] if n != b"transfer-encoding"]
    return {**scope, "headers": [*headers, (b"content-length", str(length).encode())]}


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the buffered body once, then what the server says (a disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _send_django_response(send: Send, response: Any) -> None:
    headers = [(k.encode("latin1"), v.encode("latin1")) for k, v in response.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})


refuse_insecure_start()  # no web with a public secret key, outside development (DJANGO_DEBUG)

# As in scrapejobs/wsgi.py (issue 7): load the URLconf and every view module now, then take what
# is loaded out of the garbage collector's sight, so a full collection does not stall requests.
get_resolver().url_patterns  # noqa: B018 - the import is the point
gc.freeze()
