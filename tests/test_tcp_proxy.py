"""The faults tests/support/tcp_proxy.py makes, checked against a local echo server: a black hole
that accepts and never answers, a reset after N bytes, a bandwidth limit; loopback only."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.procs import wait_for
from tests.support.tcp_proxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[int]:
    """A TCP echo server on loopback: its port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()


def _proxy(port: int, **kw: float) -> TcpProxy:
    return TcpProxy(upstream_host="127.0.0.1", upstream_port=port, **kw).start()  # type: ignore[arg-type]


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n and (data := sock.recv(n - len(out))):
        out += data
    return out


def test_the_proxy_listens_on_loopback_only(echo: int) -> None:
    proxy = _proxy(echo)
    try:
        assert proxy._listener.getsockname()[0] == "127.0.0.1"
    finally:
        proxy.stop()


def test_a_black_hole_accepts_and_never_answers_and_open_connections_resume_after_it(echo: int) -> None:
    proxy = _proxy(echo)
    try:
        before = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        before.sendall(b"ping")
        assert _read(before, 4) == b"ping"

        proxy.black_hole()
        before.sendall(b"held")
        during = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)  # accepted
        during.sendall(b"hello")
        wait_for(lambda: proxy.held == 1, what="the proxy to hold the new connection")
        # Silence is the subject: nothing comes back within a second, on either connection.
        for sock in (before, during):
            sock.settimeout(1.0)
            with pytest.raises(TimeoutError):
                sock.recv(16)

        proxy.restore()
        before.settimeout(5)
        assert _read(before, 4) == b"held"  # what waited is delivered
        during.settimeout(5)
        # The connection held during the hole is closed: its unread request makes that a reset.
        with pytest.raises(ConnectionResetError):
            during.recv(16)
    finally:
        proxy.stop()


def test_a_black_hole_that_strands_its_connections_forwards_only_new_ones_after_it(echo: int) -> None:
    proxy = _proxy(echo)
    try:
        before = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        before.sendall(b"ping")
        assert _read(before, 4) == b"ping"
        proxy.black_hole()
        before.sendall(b"held")
        proxy.restore(strand=True)
        after = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        after.sendall(b"pong")
        assert _read(after, 4) == b"pong"
        before.sendall(b"more")
        # Silence is the subject: the stranded connection carries nothing, though new ones do.
        before.settimeout(1.0)
        with pytest.raises(TimeoutError):
            before.recv(16)
    finally:
        proxy.stop()


def test_a_connection_is_reset_after_the_bytes_it_may_carry(echo: int) -> None:
    proxy = _proxy(echo, reset_after_bytes=1000)
    try:
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        sock.sendall(b"a" * 400)
        assert _read(sock, 400) == b"a" * 400  # 800 bytes carried, both directions counted
        received = b""
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"b" * 400)
            while data := sock.recv(65536):
                received += data
            sock.sendall(b"c")  # a reset socket refuses even if recv saw an end
        assert len(received) <= 200
        assert proxy.resets == 1
    finally:
        proxy.stop()


def test_a_thin_pipe_carries_no_more_than_its_bandwidth(echo: int) -> None:
    proxy = _proxy(echo, bytes_per_s=40_000)
    try:
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        started = time.monotonic()
        sock.sendall(b"x" * 40_000)
        assert _read(sock, 40_000) == b"x" * 40_000
        # time is the subject: the bandwidth; 40 kB each way at 40 kB/s cannot take less than about a
        # second (the last tenth-of-a-second chunk is sent without its pause).
        assert time.monotonic() - started >= 0.9
        assert proxy.throttled == 80_000  # both directions counted
    finally:
        proxy.stop()
