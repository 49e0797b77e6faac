"""A local HTTP target for tests: a real threaded server on 127.0.0.1 with programmable answers.

Routes (all deterministic, so results can be compared byte for byte):
- ``/bytes/N[?delay=S]`` N bytes of a fixed pseudo-random pattern (``body_for(N)``), after S s
- ``/status/C``          answers status C with a short body
- ``/slow?delay=S``      waits S seconds before answering (a target that never answers: big S)
- ``/drip?n=N&delay=S``  sends N bytes one chunk at a time, S seconds apart (a long download)
- ``/flaky/KEY?fail=K&code=C``  answers C for the first K requests of KEY, then 200
- ``/retry-after/KEY?fail=K&after=S``  429 with Retry-After: S for the first K requests, then 200
- ``/redirect/N``        N redirects, then 200
- ``/echo``              echoes method, headers and body as JSON
- ``/go?to=URL``         302 to URL (a redirect to another host)
- ``/site/N[?n=S&delay=D]`` page N of a linked HTML site of S pages [31] (a binary tree: page N
                         links to 2N+1 and 2N+2, to page 0 with a fragment, to ``/private/N``, to
                         another host and to a mailto:), after D s; ``/private/N`` a page linking
                         nowhere (crawl tests, docs/crawls.md)
- ``/robots.txt``        ``server.robots`` (status, body) when set, else 404
- any path in ``server.files`` (path -> (content type, bytes)): those bytes (sitemaps of a crawl test)
- ``/shed/...[?every=K]`` 503 to every K-th request of the route (``server.shed_every`` unless
                         given; 0: never), else 200 (a target shedding a share of its load, which a
                         test can change mid-run)
A server listens on 127.0.0.1 unless given another loopback address (``TargetServer("127.0.0.7")``,
``TargetServer("::1")``). Every request is logged with its arrival time (``requests_for(path_prefix)``).
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


def body_for(n: int) -> bytes:
    """The exact body ``/bytes/N`` answers with."""
    return _pattern(n)


def _pattern(n: int) -> bytes:
    block = hashlib.sha256(str(n).encode()).digest() * 2048  # 64 KiB, depends on n
    reps, rest = divmod(n, len(block))
    return block * reps + block[:rest]


def _site_page(kind: str, n: int, q: dict[str, str]) -> bytes:
    """A page of the ``/site`` tree (see the module's docstring)."""
    links = []
    if kind == "site":
        size = int(q.get("n", "31"))
        keep = "&".join(f"{k}={v}" for k, v in sorted(q.items()))
        suffix = f"?{keep}" if keep else ""
        links = [f"/site/{c}{suffix}" for c in (2 * n + 1, 2 * n + 2) if c < size]
        links += [f"/site/0{suffix}#top", f"/private/{n}", "http://elsewhere.example/x", "mailto:a@b.example"]
    anchors = "".join(f'<li><a href="{href}">link</a></li>' for href in links)
    return f"<!doctype html><html><body><h1>{kind} {n}</h1><ul>{anchors}</ul></body></html>".encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as servers in front of real sites set it (nginx's tcp_nodelay, on by default):
    # the headers and the body go out as two writes, and with Nagle's algorithm the body waited
    # for the client's ACK of the headers, which a kept-alive connection delays by 40 ms (Linux's
    # delayed ACK). Every client that reused its connection paid 40 ms a request; one that opened a
    # new connection each time (still in quick-ACK mode) did not (docs/benchmarks.md).
    disable_nagle_algorithm = True
    server: TargetServer  # type: ignore[assignment]

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        hdrs = {"Content-Type": "application/octet-stream", "Content-Length": str(len(body))}
        hdrs.update(headers or {})
        for k, v in hdrs.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(parts.query).items()}
        path = parts.path
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.log(path, self.command, dict(self.headers), body)
        seg = path.strip("/").split("/")
        try:
            if path in self.server.files:
                content_type, content = self.server.files[path]
                self._send(200, content, {"Content-Type": content_type})
            elif path == "/robots.txt" and self.server.robots is not None:
                self._send(
                    self.server.robots[0], self.server.robots[1].encode(), {"Content-Type": "text/plain"}
                )
            elif seg[0] in ("site", "private"):
                # time is the subject: the delay this local target simulates
                time.sleep(float(q.get("delay", "0")))
                self._send(
                    200, _site_page(seg[0], int(seg[1]), q), {"Content-Type": "text/html; charset=utf-8"}
                )
            elif seg[0] == "shed":
                k = self.server.count("/shed")
                every = int(q.get("every", self.server.shed_every))
                shed = every > 0 and k % every == 0
                self._send(503 if shed else 200, b"shed" if shed else b"ok")
            elif seg[0] == "bytes":
                n = int(seg[1])
                if "delay" in q:  # a target that takes this long to answer (benchmarks: 0.5 s)
                    time.sleep(float(q["delay"]))
                self._send(200, _pattern(n))
            elif seg[0] == "unsized":  # n bytes of unknown length: no Content-Length, ended by closing
                data = _pattern(int(seg[1]))
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                for i in range(0, len(data), 1 << 16):
                    self.wfile.write(data[i : i + (1 << 16)])
                self.close_connection = True
            elif seg[0] == "status":
                time.sleep(float(q.get("delay", "0")))  # a slow failure (single-flight tests)
                self._send(int(seg[1]), f"status {seg[1]}".encode(), {"Content-Type": "text/plain"})
            elif seg[0] == "slow":
                # time is the subject: a target that takes this long to answer
                time.sleep(float(q.get("delay", "60")))
                self._send(200, b"finally")
            elif seg[0] == "drip":
                n, delay = int(q.get("n", "10")), float(q.get("delay", "1"))
                self.send_response(200)
                self.send_header("Content-Length", str(n))
                self.end_headers()
                for _ in range(n):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    # time is the subject: the pause between the bytes this target drips
                    time.sleep(delay)
            elif seg[0] == "flaky":
                k = self.server.count(path)
                if k <= int(q.get("fail", "1")):
                    self._send(int(q.get("code", "503")), b"try again")
                else:
                    self._send(200, b"ok after " + str(k - 1).encode() + b" failures")
            elif seg[0] == "retry-after":
                k = self.server.count(path)
                if k <= int(q.get("fail", "1")):
                    self._send(429, b"slow down", {"Retry-After": q.get("after", "1")})
                else:
                    self._send(200, b"ok")
            elif seg[0] == "go":
                self._send(302, b"", {"Location": q["to"]})
            elif seg[0] == "redirect":
                n = int(seg[1])
                if n > 0:
                    self._send(302, b"", {"Location": f"/redirect/{n - 1}"})
                else:
                    self._send(200, b"landed")
            elif seg[0] == "echo":
                payload = {"method": self.command, "headers": dict(self.headers), "body": body.decode()}
                self._send(200, json.dumps(payload).encode(), {"Content-Type": "application/json"})
            else:
                self._send(404, b"no such route")
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_POST = do_HEAD = _handle


class TargetServer(ThreadingHTTPServer):
    # A listen backlog for the hundreds of connections a test opens at once (socketserver's is 5:
    # past it, a connection waits for SYN retries, 1 s, 3 s, 7 s..., and a busy machine turned
    # that into connect timeouts that were the test server's, not the service's).
    request_queue_size = 1024
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """``host``: a loopback address only (127.0.0.0/8, or ``::1`` for an IPv6 target)."""
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), _Handler)
        self._lock = threading.Lock()
        self._counts: dict[str, int] = defaultdict(int)
        self.requests: list[tuple[float, str, str, dict, bytes]] = []
        self.robots: tuple[int, str] | None = None
        self.files: dict[str, tuple[str, bytes]] = {}
        self.shed_every = 0

    @property
    def base_url(self) -> str:
        host = str(self.server_address[0])
        return f"http://{f'[{host}]' if ':' in host else host}:{self.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def count(self, path: str) -> int:
        with self._lock:
            self._counts[path] += 1
            return self._counts[path]

    def log(self, path: str, method: str, headers: dict, body: bytes) -> None:
        with self._lock:
            self.requests.append((time.time(), path, method, headers, body))

    def requests_for(self, prefix: str) -> list[tuple[float, str, str, dict, bytes]]:
        with self._lock:
            return [r for r in self.requests if r[1].startswith(prefix)]

    def start(self) -> TargetServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def stop_servers(servers: list[TargetServer]) -> None:
    """Stop many target servers at once: each ``shutdown`` waits up to serve_forever's poll
    interval (0.5 s) for its loop to notice, so a hundred stopped one after another took 50 s."""
    with ThreadPoolExecutor(max_workers=len(servers) or 1) as pool:
        list(pool.map(TargetServer.stop, servers))
