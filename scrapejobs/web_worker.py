"""The web process's gunicorn worker class: uvicorn (ASGI, scrapejobs/asgi.py) with two changes.

- A request the HTTP parser cannot read (broken chunk framing, a malformed request line) is
  answered 400 in the API's error shape (apps/api/errors.py), as the WSGI server's was, not with
  uvicorn's plain-text page: clients parse one error body.
- A request target over ``MAX_REQUEST_TARGET_BYTES`` (8 KiB, as common front proxies allow) is
  answered ``414`` and headers over ``MAX_HEADER_BYTES`` in all ``431``, as they arrive, before
  the application sees them: a path of megabytes is never parsed, logged or masked.
- No ASGI lifespan: Django does not speak it, and asking logs a line at every start.
- The ``?wait=`` listener (apps/query/waiting.py) starts with the worker's event loop, not at
  the first ``?wait=``: it also drops the read cache's copies of jobs that became final.

Imported by the gunicorn master, before any worker starts: nothing of Django here.
"""

from __future__ import annotations

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
}


class _Oversized(Exception):
    """Raised in a parser callback: the parser stops, uvicorn answers through send_400_response."""


class ApiErrorHttpProtocol(HttpToolsProtocol):
    _oversized: int | None = None
    _header_bytes = 0

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._oversized, self._header_bytes = None, 0

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
