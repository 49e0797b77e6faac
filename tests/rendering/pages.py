"""A local site for the rendering tests: a threaded HTTP server on a loopback address of the
test's choosing (127.0.0.1, 127.0.0.2...), serving the pages a test puts in ``pages`` and
logging every request it gets."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass
class Page:
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: PageServer  # type: ignore[assignment]

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        path = urlsplit(self.path).path
        self.server.log.append((time.time(), self.command, path))
        self.server.peers.append((path, self.client_address[1]))
        page = self.server.pages.get(path)
        if page is None:
            page = Page(b"not here", "text/plain", 404)
        if page.delay_s:
            # time is the subject: the delay this local page server simulates
            time.sleep(page.delay_s)
        self.send_response(page.status)
        headers = {"Content-Type": page.content_type, "Content-Length": str(len(page.body)), **page.headers}
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(page.body)

    do_GET = do_POST = do_HEAD = _answer


class PageServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__((host, 0), _Handler)
        self.host = host
        self.pages: dict[str, Page] = {}
        self.log: list[tuple[float, str, str]] = []
        self.peers: list[tuple[str, int]] = []  # (path, the client's port) of every request

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.server_address[1]}{path}"

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def html(self, path: str, text: str, **kw: object) -> str:
        self.pages[path] = Page(text.encode(), **kw)  # type: ignore[arg-type]
        return self.url(path)

    def requested(self, path: str | None = None) -> list[str]:
        return [p for _t, _m, p in self.log if path is None or p == path]

    def start(self) -> PageServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
