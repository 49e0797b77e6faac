"""A local target that answers conditional requests (RFC 9110 13), for the revalidation tests and
``make bench BENCH=revalidate`` (docs/revalidation.md).

``/page/NAME`` answers the page's body (``server.pages[NAME]``, else ``size`` bytes of a pattern
depending on NAME) with an ``ETag`` (strong, or weak ``W/"…"`` with ``server.weak``) and a fixed
``Last-Modified``. With ``server.honour`` (the default) a request whose ``If-None-Match`` names
the current ETag (weak comparison), or, without one, whose ``If-Modified-Since`` is that date, is
answered ``304 Not Modified`` without a body; without it every request gets the whole body (a
server that ignores the condition). Every request is logged with its headers, and the body bytes
sent are counted; ``/stats`` answers the counters as JSON. ``python -m
tests.support.conditional_target PORT SIZE`` serves until killed (the benchmark's target, a
process of its own whose CPU is measured).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

LAST_MODIFIED = "Tue, 01 Dec 2026 00:00:00 GMT"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ConditionalTarget  # type: ignore[assignment]

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = urlsplit(self.path).path
        srv = self.server
        headers = {k.lower(): v for k, v in self.headers.items()}
        if path == "/stats":
            with srv.lock:
                stats = {"requests": len(srv.requests), "bytes_sent": srv.bytes_sent}
                stats["not_modified"] = srv.not_modified
            self._send(200, json.dumps(stats).encode(), {"Content-Type": "application/json"})
            return
        with srv.lock:
            if srv.keep_log:
                srv.requests.append((path, headers))
            else:
                srv.requests.append((path, {}))
        if not path.startswith("/page/"):
            self._send(404, b"no such page")
            return
        body = srv.body(path.removeprefix("/page/"))
        etag = srv.etag(body)
        if srv.honour and _not_modified(headers, etag):
            with srv.lock:
                srv.not_modified += 1
            self._send(304, b"", {"ETag": etag, "Last-Modified": LAST_MODIFIED})
            return
        with srv.lock:
            srv.bytes_sent += len(body)
        self._send(200, body, {"ETag": etag, "Last-Modified": LAST_MODIFIED, "Content-Type": "text/html"})

    def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if code != 304:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)


def _not_modified(headers: dict[str, str], etag: str) -> bool:
    """RFC 9110 13.1.2 and 13.1.3: If-None-Match, weak comparison, wins over If-Modified-Since."""
    inm = headers.get("if-none-match")
    if inm is not None:
        wanted = {t.strip().removeprefix("W/") for t in inm.split(",")}
        return "*" in wanted or etag.removeprefix("W/") in wanted
    return headers.get("if-modified-since") == LAST_MODIFIED


class ConditionalTarget(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a worker's burst of connections is not refused

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, size: int = 16 * 1024) -> None:
        super().__init__((host, port), _Handler)
        self.size = size
        self.pages: dict[str, bytes] = {}
        self.honour = True
        self.weak = False
        self.lock = threading.Lock()
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.keep_log = True  # the benchmark's target keeps no headers
        self.bytes_sent = 0
        self.not_modified = 0
        self._thread: threading.Thread | None = None

    def body(self, name: str) -> bytes:
        if name in self.pages:
            return self.pages[name]
        block = hashlib.sha256(name.encode()).hexdigest().encode()
        return (block * (self.size // len(block) + 1))[: self.size]

    def etag(self, body: bytes) -> str:
        tag = f'"{hashlib.sha256(body).hexdigest()[:16]}"'
        return f"W/{tag}" if self.weak else tag

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def url(self, name: str) -> str:
        return f"{self.base_url}/page/{name}"

    def requests_for(self, name: str) -> list[dict[str, str]]:
        with self.lock:
            return [h for p, h in self.requests if p == f"/page/{name}"]

    def start(self) -> ConditionalTarget:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


if __name__ == "__main__":
    served = ConditionalTarget(port=int(sys.argv[1]), size=int(sys.argv[2]))
    served.keep_log = False
    served.serve_forever()
