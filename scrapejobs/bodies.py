"""The bound on request bodies (NFR-19, NFR-33, docs/limits.md): Django's ASGI handler reading a
body through a counter that refuses it past its path's limit (413) or past
``SCRAPEJOBS_REQUEST_BODY_TIMEOUT_S`` (408), and a batch's body written once to its spool file,
charged to its tenant's share of spool space in flight (``SpoolQuota``: past it, 503).

The web process's application (scrapejobs/asgi.py) imports it once Django is set up.
"""

from __future__ import annotations

import asyncio
import math
import os
import tempfile
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler

from apps.api.errors import ApiError, api_error_response
from scrapejobs.middleware import BATCHES_PATH, too_large_response

Scope = dict[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
# Scope key: the tenant a batch body is charged to (set by scrapejobs/asgi.py's application).
BATCH_TENANT = "scrapejobs.batch_tenant"


class BodyTooLarge(Exception):
    """The body went past its path's limit while it was being read."""

    def __init__(self, *, path: str, limit: int):
        super().__init__(f"{path}: body over {limit} bytes")
        self.path, self.limit = path, limit


class BodyTimedOut(Exception):
    """The body was still arriving SCRAPEJOBS_REQUEST_BODY_TIMEOUT_S after the headers."""


class SpoolFull(Exception):
    """The tenant's batch uploads in flight hold their share of spool space."""


class SpoolQuota:
    """Bytes of batch bodies in spool files in this process, per tenant: a
    tenant's uploads in flight together stay under ``limit`` (SCRAPEJOBS_BATCH_SPOOL_TENANT_BYTES),
    so that tenants uploading at once cannot fill the pod's temporary volume for one another.
    Charged as the body arrives, released when the request is over (its file is gone then)."""

    def __init__(self, *, limit: int):
        self.limit = limit
        self._held: dict[Any, int] = {}
        self._lock = threading.Lock()  # charged on the loop, released from Django's threads too

    def charge(self, tenant: Any, size: int) -> None:
        with self._lock:
            held = self._held.get(tenant, 0) + size
            if held > self.limit:
                raise SpoolFull
            self._held[tenant] = held

    def release(self, tenant: Any, size: int) -> None:
        with self._lock:
            left = self._held.get(tenant, 0) - size
            if left > 0:
                self._held[tenant] = left
            else:
                self._held.pop(tenant, None)

    def held(self, tenant: Any) -> int:
        return self._held.get(tenant, 0)


spool_quota = SpoolQuota(limit=settings.SCRAPEJOBS_BATCH_SPOOL_TENANT_BYTES)
# The scope key under which a batch's spool file reaches its view (apps/batches/views.py).
SPOOLED_BODY = "scrapejobs.spooled_body"


class _CountedBody:
    """The server's ``receive``, counting body bytes: one message past ``limit`` raises
    BodyTooLarge, so at most the limit plus one message (the server's read, 64 KiB for uvicorn)
    is ever taken from the client; a body not all in by ``deadline`` (the event loop's clock)
    raises BodyTimedOut. ``tenant`` is set for a batch: its body goes to a spool file, charged to
    that tenant (BoundedBodyHandler.read_body)."""

    def __init__(self, receive: Receive, *, path: str, limit: int, deadline: float, tenant: Any = None):
        self._receive, self._path, self._limit, self._deadline = receive, path, limit, deadline
        self.tenant = tenant
        self.read = 0
        self._ended = False

    async def __call__(self) -> Message:
        if self._ended:  # Django's disconnect listener: no deadline on waiting for the close
            return await self._receive()
        left = self._deadline - asyncio.get_running_loop().time()
        try:
            message = await asyncio.wait_for(self._receive(), timeout=max(left, 0))
        except TimeoutError:
            raise BodyTimedOut from None
        if message["type"] == "http.request":
            self.read += len(message.get("body", b""))
            if self.read > self._limit:
                raise BodyTooLarge(path=self._path, limit=self._limit)
            self._ended = not message.get("more_body", False)
        return message


class BoundedBodyHandler(ASGIHandler):
    """Django's ASGI handler, reading the body through ``_CountedBody`` (Django's own
    ``read_body``: a file in memory up to FILE_UPLOAD_MAX_MEMORY_SIZE, on disk past it, so a batch
    is never held in memory) and answering the documented 413 the moment it goes past its
    limit."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        limit = body_limit(path, scope.get("method", ""))
        deadline = asyncio.get_running_loop().time() + settings.SCRAPEJOBS_REQUEST_BODY_TIMEOUT_S
        counted = _CountedBody(
            receive, path=path, limit=limit, deadline=deadline, tenant=scope.get(BATCH_TENANT)
        )
        try:
            await super().handle(scope, counted, send)
        except BodyTooLarge as refused:
            await send_django_response(
                send, too_large_response(path=refused.path, limit=refused.limit), close=True
            )
        except BodyTimedOut:
            await send_django_response(send, api_error_response(_body_timed_out()), close=True)
        except SpoolFull:
            await send_django_response(send, _spool_full_response(), close=True)

    async def read_body(self, receive: Any) -> Any:
        tenant = getattr(receive, "tenant", None)
        if tenant is None:
            return await super().read_body(receive)
        # A batch: written once, to the file its view reads (Django's read_body would spool it to
        # a file of its own, which the view copied again), charged to its tenant as it arrives.
        # An unnamed temporary file: whatever ends the request, nothing of it is left on disk.
        # Unbuffered: each message's body (up to 64 KiB) is one write either way, and the file's
        # size is then exactly the bytes charged for it, none held back in a buffer.
        spool = tempfile.TemporaryFile(dir=settings.FILE_UPLOAD_TEMP_DIR, buffering=0)  # noqa: SIM115 - Django closes it
        charged = 0
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise RequestAborted
                chunk = message.get("body", b"")
                if chunk:
                    spool_quota.charge(tenant, len(chunk))
                    charged += len(chunk)
                    written = memoryview(chunk)
                    while written:  # a raw write may take part of it
                        written = written[spool.write(written) :]
                if not message.get("more_body", False):
                    break
        except BaseException:
            spool.close()
            spool_quota.release(tenant, charged)
            raise
        spool.seek(0)
        return _ChargedSpool(spool, tenant=tenant, size=charged)

    def create_request(self, scope: Mapping[str, Any], body_file: Any) -> Any:
        if isinstance(body_file, _ChargedSpool):
            scope = {**scope, SPOOLED_BODY: body_file}
        # A chunked body comes without a Content-Length, which Django and DRF read as no body:
        # now that it is read (and bounded), it has a length.
        if not _has_length(scope):
            size = body_file.seek(0, os.SEEK_END)
            body_file.seek(0)
            if size:
                scope = with_length(dict(scope), size)
        return super().create_request(scope, body_file)


class _ChargedSpool:
    """A batch's spool file, handing its bytes back to the tenant's spool share when it is
    closed (by the view, or by Django's handler when the request is over: once either way)."""

    def __init__(self, file: IO[bytes], *, tenant: Any, size: int):
        self._file, self._tenant, self._size = file, tenant, size

    def close(self) -> None:
        if self._size is not None:
            spool_quota.release(self._tenant, self._size)
            self._size = None  # type: ignore[assignment]
        self._file.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def __enter__(self) -> _ChargedSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Any:
        return iter(self._file)


def body_limit(path: str, method: str) -> int:
    """SCRAPEJOBS_BATCH_MAX_BYTES for POST /batches, SCRAPEJOBS_MAX_REQUEST_BYTES for every other
    path and method (docs/limits.md)."""
    if path == BATCHES_PATH and method == "POST":
        return settings.SCRAPEJOBS_BATCH_MAX_BYTES
    return settings.SCRAPEJOBS_MAX_REQUEST_BYTES


def _body_timed_out() -> ApiError:
    return ApiError(
        status_code=408,
        type="invalid_request",
        code="request_timeout",
        detail=f"The request body did not arrive within {settings.SCRAPEJOBS_REQUEST_BODY_TIMEOUT_S:g} s.",
    )


def _spool_full_response() -> Any:
    response = api_error_response(
        ApiError(
            status_code=503,
            type="unavailable",
            code="spool_full",
            detail="This tenant's batch uploads in progress hold all of its spool space; "
            "send this one when one of them is over.",
        )
    )
    response["Retry-After"] = str(math.ceil(settings.SCRAPEJOBS_REQUEST_BODY_TIMEOUT_S))
    return response


def header_value(scope: Scope, name: bytes) -> bytes:
    return next((v for n, v in scope["headers"] if n == name), b"")


def has_header(scope: Mapping[str, Any], name: bytes) -> bool:
    return any(n == name for n, _ in scope["headers"])


def _has_length(scope: Mapping[str, Any]) -> bool:
    return has_header(scope, b"content-length")


def with_length(scope: Scope, length: int) -> Scope:
    headers = [(n, v) for n, v in scope["headers"] if n not in (b"transfer-encoding", b"content-length")]
    return {**scope, "headers": [*headers, (b"content-length", str(length).encode())]}


async def send_django_response(send: Send, response: Any, *, close: bool = False) -> None:
    headers = [(k.encode("latin1"), v.encode("latin1")) for k, v in response.items()]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})
