"""The web process's gunicorn worker class: uvicorn (ASGI, scrapejobs/asgi.py) with two changes.

- A request the HTTP parser cannot read (broken chunk framing, a malformed request line) is
  answered 400 in the API's error shape (apps/api/errors.py), as the WSGI server's was, not with
  uvicorn's plain-text page: clients parse one error body.
- A request target over ``MAX_REQUEST_TARGET_BYTES`` (8 KiB, as common front proxies allow) is
  answered ``414`` and headers over ``MAX_HEADER_BYTES`` in all ``431``, as they arrive, before
  the application sees them: a path of megabytes is never parsed, logged or masked.
- Headers that trickle are cut: a request whose headers are not all in
  ``SCRAPEJOBS_REQUEST_HEADER_TIMEOUT_S`` after its first byte (or after the connection opened)
  is answered ``408`` and its connection closed (the body's own deadline is scrapejobs/asgi.py's).
- A connection past ``SCRAPEJOBS_WEB_MAX_CONNECTIONS`` open in this worker is answered ``503``
  with ``Retry-After`` and closed as it is accepted, before anything is read from it.
- No ASGI lifespan: Django does not speak it, and asking logs a line at every start.
- The ``?wait=`` listener (apps/query/waiting.py) starts with the worker's event loop, not at
  the first ``?wait=``: it also drops the read cache's copies of jobs that became final.

Imported by the gunicorn master, before any worker starts: nothing of Django here.
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn_worker import UvicornWorker

# The body of apps.api.errors.body_unreadable(), written out: the master process has no Django.
UNREADABLE_BODY = json.dumps(
    {"type": "invalid_request", "code": "parse_error", "detail": "The request body could not be read."}
).encode()
MAX_REQUEST_TARGET_BYTES = 8192
MAX_HEADER_BYTES = 65536


def _refusal(code: str, detail: str) -> bytes:
    return json.dumps({"type": "invalid_request", "code": code, "detail": detail}).encode()


# Each answer the parser's callbacks can stop a request with: status line and body (the API's
# error shape, apps/api/errors.py).
_OVERSIZED = {
    414: (
        b"HTTP/1.1 414 URI Too Long\r\n",
        json.dumps(
            {
                "type": "invalid_request",
                "code": "uri_too_long",
                "detail": f"The request target is over {MAX_REQUEST_TARGET_BYTES} bytes.",
            }
        ).encode(),
    ),
    431: (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
        json.dumps(
            {
                "type": "invalid_request",
                "code": "headers_too_large",
                "detail": f"The request's headers are over {MAX_HEADER_BYTES} bytes.",
            }
        ).encode(),
    ),
    408: (
        b"HTTP/1.1 408 Request Timeout\r\n",
        _refusal("request_timeout", "The request's headers did not arrive in time."),
    ),
    503: (
        b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\n",
        json.dumps(
            {
                "type": "unavailable",
                "code": "too_many_connections",
                "detail": "This server holds as many connections as it takes; try again.",
            }
        ).encode(),
    ),
}


@functools.cache
def _limits() -> tuple[float, int]:
    """(header timeout, connection cap): read once, in a worker, where Django's settings are
    loaded (a connection is only made once the application is)."""
    from django.conf import settings

    return settings.SCRAPEJOBS_REQUEST_HEADER_TIMEOUT_S, settings.SCRAPEJOBS_WEB_MAX_CONNECTIONS


class _Oversized(Exception):
    """Raised in a parser callback: the parser stops, uvicorn answers through send_400_response."""


class ApiErrorHttpProtocol(HttpToolsProtocol):
    _oversized: int | None = None
    _header_bytes = 0
    _header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        header_timeout, max_connections = _limits()
        if len(self.connections) > max_connections:
            self._refuse(503)
            return
        self._header_deadline = self.loop.call_later(header_timeout, self._headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._header_clock_stop()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._oversized, self._header_bytes = None, 0
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(_limits()[0], self._headers_late)

    def on_headers_complete(self) -> None:
        self._header_clock_stop()
        super().on_headers_complete()

    def _header_clock_stop(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_late(self) -> None:
        self._header_deadline = None
        if self.cycle is not None and not self.cycle.response_complete:
            # An answer is being written on this connection (a pipelined request's headers are
            # the late ones): no 408 in the middle of it, the connection just ends.
            self.transport.close()
            return
        self._refuse(408)

    def _refuse(self, status: int) -> None:
        self._oversized = status
        self.send_400_response("")

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_REQUEST_TARGET_BYTES:
            self._oversized = 414
            raise _Oversized

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEADER_BYTES:
            self._oversized = 431
            raise _Oversized
        super().on_header(name, value)

    def send_400_response(self, msg: str) -> None:
        status_line, body = _OVERSIZED.get(
            self._oversized or 0, (b"HTTP/1.1 400 Bad Request\r\n", UNREADABLE_BODY)
        )
        head = [status_line]
        for name, value in self.server_state.default_headers:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"content-type: application/json\r\n")
        head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        self.transport.close()


class WebWorker(UvicornWorker):
    CONFIG_KWARGS: dict[str, Any] = {
        **UvicornWorker.CONFIG_KWARGS,
        "http": ApiErrorHttpProtocol,
        "lifespan": "off",
    }

    async def _serve(self) -> None:
        # In the worker process, on its event loop, after the application (Django) was loaded.
        from apps.query.waiting import final_hub

        final_hub().start()
        await super()._serve()
