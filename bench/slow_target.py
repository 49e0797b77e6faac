"""A local target that holds thousands of slow requests cheaply: one asyncio task per connection
(uvloop when installed), not one thread, so 5,600 requests each waiting 20 s cost a few KiB each.

``python -m bench.slow_target`` prints its base URL (``http://127.0.0.1:PORT``) and serves, over
HTTP/1.1 with keep-alive (the fetcher's pool reuses connections):

- ``/bytes/N?delay=S``  N bytes of ``tests.support.target.body_for(N)`` after S seconds (the same
                        body the test target answers, so a stored result can be checked)
- ``/stats``            JSON ``{requests, answered, in_flight, max_in_flight}``; ``/stats?reset=1``
                        also restarts ``max_in_flight`` from the current count

``in_flight`` is the number of ``/bytes`` requests received and not yet answered: the fetches in
flight as the target sees them, which bench/peak.py and bench/capacity.py report beside Little's
law. Bound to 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from urllib.parse import parse_qs, urlsplit

from tests.support.target import body_for

MAX_HEADER_BYTES = 16384


class _Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.answered = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def as_json(self) -> bytes:
        return json.dumps(
            {
                "requests": self.requests,
                "answered": self.answered,
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
            }
        ).encode()


_bodies: dict[int, bytes] = {}


def _body(n: int) -> bytes:
    if n not in _bodies:
        _bodies[n] = body_for(n)
    return _bodies[n]


def _response(code: int, body: bytes, content_type: str = "application/octet-stream") -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(code, "Other")
    head = (
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


async def _answer(stats: _Stats, method: str, target: str) -> bytes:
    parts = urlsplit(target)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    seg = parts.path.strip("/").split("/")
    if seg[0] == "stats":
        if "reset" in query:
            stats.max_in_flight = stats.in_flight
        return _response(200, stats.as_json(), "application/json")
    if seg[0] == "bytes" and len(seg) == 2 and seg[1].isdigit():
        stats.requests += 1
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            await asyncio.sleep(float(query.get("delay", "0")))
        finally:
            stats.in_flight -= 1
        stats.answered += 1
        body = _body(int(seg[1]))
        return _response(200, b"" if method == "HEAD" else body)
    return _response(404, b"no such route", "text/plain")


async def _connection(stats: _Stats, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            try:
                method, target, _version = lines[0].split(" ", 2)
            except ValueError:
                writer.write(_response(400, b"bad request line", "text/plain"))
                return
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip() or 0)
            if length:
                await reader.readexactly(length)
            writer.write(await _answer(stats, method, target))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def _serve() -> None:
    stats = _Stats()
    server = await asyncio.start_server(
        lambda r, w: _connection(stats, r, w),
        "127.0.0.1",
        0,
        backlog=4096,
        limit=MAX_HEADER_BYTES,
    )
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    # Every fetch in flight is a socket here: take the hard limit of open files.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop  # noqa: PLC0415 - a runtime dependency of the web; plain asyncio otherwise
    except ImportError:
        run = asyncio.run
    else:
        run = uvloop.run
    try:
        run(_serve())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
