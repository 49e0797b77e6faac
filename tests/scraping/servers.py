"""Extra local HTTP answers the shared target does not give: absolute redirects and bodies
without a Content-Length (chunked), for the fetcher's tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server  # type: ignore[assignment]

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.do_GET()

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.server.paths.append(parts.path)
        if parts.path == "/to":  # an absolute redirect anywhere
            self.send_response(int(q.get("code", "302")))
            self.send_header("Location", q["url"])
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif parts.path == "/chunked":  # n bytes in 1 KiB chunks, length unknown up front
            n = int(q["n"])
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent = 0
            try:
                while sent < n:
                    piece = b"z" * min(1024, n - sent)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    sent += len(piece)
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.paths: list[str] = []

    @property
    def port(self) -> int:
        return self.server_address[1]


@contextmanager
def extra_server() -> Iterator[_Server]:
    server = _Server()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
