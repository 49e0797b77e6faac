"""The web process's gunicorn worker class: uvicorn (ASGI, scrapejobs/asgi.py) with two changes.

- A request the HTTP parser cannot read (broken chunk framing, a malformed request line) is
  answered 400 in the API's error shape (apps/api/errors.py), as the WSGI server's was, not with
  uvicorn's plain-text page: clients parse one error body.
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


class ApiErrorHttpProtocol(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        head = [b"HTTP/1.1 400 Bad Request\r\n"]
        for name, value in self.server_state.default_headers:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"content-type: application/json\r\n")
        head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(UNREADABLE_BODY))
        self.transport.write(b"".join(head) + UNREADABLE_BODY)
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
