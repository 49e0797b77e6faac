"""A TCP proxy a test can break the way networks break: one service process reaches PostgreSQL (or
Redis) through it, and the test makes the server misbehave for that process alone. It listens on
loopback only.

- ``cut()`` closes every proxied connection and refuses new ones (accepted, then closed at once:
  what a client sees from a server that is restarting); ``restore()`` forwards again.
- ``black_hole()``: a partition. New connections are accepted and never answered; open ones
  forward nothing either way (what was sent waits, as unacknowledged segments would).
  ``restore()`` ends it: open connections carry on with what waited, the connections accepted
  during it are closed (their clients gave up on them). ``restore(strand=True)`` ends it for new
  connections only: the ones open during it never carry another byte (a firewall or NAT that
  forgot them: half-open for their clients, who learn it only from their own timeouts).
- ``reset_after_bytes``: each connection is reset (RST) once it has carried that many bytes, both
  directions counted: a middlebox or a server dying in the middle of an answer.
- ``bytes_per_s``: each direction of each connection carries at most that many bytes a second:
  a thin pipe (``throttled`` counts the bytes it carried so).
- ``reply_delay_s`` holds every piece of the upstream's answer that long before passing it on: a
  slow server (a Redis that answers in 90 ms).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time


class TcpProxy:
    def __init__(
        self,
        *,
        upstream_host: str,
        upstream_port: int,
        reply_delay_s: float = 0.0,
        reset_after_bytes: int | None = None,
        bytes_per_s: float | None = None,
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.reply_delay_s = reply_delay_s
        self.reset_after_bytes = reset_after_bytes
        self.bytes_per_s = bytes_per_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._held: set[socket.socket] = set()  # accepted during a black hole, never answered
        self._carried: dict[int, int] = {}  # bytes carried per connection (its client socket's id)
        self._reset: set[int] = set()
        self._stranded: set[int] = set()  # connections (their client socket's id) never forwarded again
        self._lock = threading.Lock()
        self._cut = threading.Event()
        self._flowing = threading.Event()  # cleared during a black hole
        self._flowing.set()
        self._stopped = threading.Event()
        self.refused = 0  # connections refused while cut
        self.held = 0  # connections accepted and never answered during black holes
        self.resets = 0  # connections reset after reset_after_bytes
        self.throttled = 0  # bytes carried at bytes_per_s

    def start(self) -> TcpProxy:
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()
        return self

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            socks, self._open = list(self._open), set()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def black_hole(self) -> None:
        self._flowing.clear()

    def restore(self, *, strand: bool = False) -> None:
        self._cut.clear()
        with self._lock:
            held, self._held = list(self._held), set()
            if strand and not self._flowing.is_set():
                self._stranded |= {id(sock) for sock in self._open}
        for s in held:
            s.close()
        self._flowing.set()

    def stop(self) -> None:
        self._stopped.set()
        self.restore()
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                self.refused += 1
                client.close()
                continue
            if not self._flowing.is_set():
                with self._lock:
                    self.held += 1
                    self._held.add(client)
                continue
            try:
                server = self._connect_upstream()
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._open |= {client, server}
                # A new connection: its socket's id may be a closed one's, whose marks are stale.
                self._carried[id(client)] = 0
                self._reset.discard(id(client))
                self._stranded.discard(id(client))
            for src, dst, delay in ((client, server, 0.0), (server, client, self.reply_delay_s)):
                threading.Thread(target=self._pipe, args=(src, dst, delay, client), daemon=True).start()

    def _connect_upstream(self) -> socket.socket:
        """A TCP upstream, or PostgreSQL's unix socket when the host is a directory (the embedded
        server of `make test` listens there, as libpq names it: <dir>/.s.PGSQL.<port>)."""
        host, port = self.upstream
        if not host.startswith("/"):
            return socket.create_connection(self.upstream, timeout=5)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.settimeout(5)
        try:
            server.connect(f"{host.rstrip('/')}/.s.PGSQL.{port}")
        except OSError:
            server.close()
            raise
        return server

    def _pipe(self, src: socket.socket, dst: socket.socket, delay_s: float, client: socket.socket) -> None:
        # A thin pipe sends at most a tenth of a second's worth at a time.
        chunk = max(1, int(self.bytes_per_s / 10)) if self.bytes_per_s else 65536
        reset = False
        try:
            while data := src.recv(chunk):
                self._flowing.wait()  # a black hole holds what was sent until it ends
                if id(client) in self._stranded:
                    self._stopped.wait()  # ... or for ever, for a stranded connection
                    return
                if delay_s:
                    # time is the subject: the latency this proxy adds to every chunk
                    time.sleep(delay_s)
                if self.reset_after_bytes is not None:
                    with self._lock:
                        room = self.reset_after_bytes - self._carried.get(id(client), 0)
                        self._carried[id(client)] = self._carried.get(id(client), 0) + len(data)
                    if room < len(data):
                        dst.sendall(data[: max(0, room)])
                        reset = True
                        return
                started = time.monotonic()
                bytes_per_s = self.bytes_per_s
                if bytes_per_s:
                    # Counted before it is sent (a reader who got the bytes sees them counted),
                    # under the lock (both directions' threads add to it).
                    with self._lock:
                        self.throttled += len(data)
                dst.sendall(data)
                if bytes_per_s:
                    # The bandwidth itself: time is the subject of this sleep.
                    time.sleep(max(0.0, len(data) / bytes_per_s - (time.monotonic() - started)))
        except OSError:
            pass
        finally:
            if reset:
                with self._lock:
                    if id(client) not in self._reset:  # counted once, whichever direction saw it
                        self._reset.add(id(client))
                        self.resets += 1
            for s in (src, dst):
                if reset and s.family != socket.AF_UNIX:
                    # SO_LINGER 0: close() sends RST, not FIN; SHUT_RD only wakes the other
                    # direction's thread from its recv.
                    with contextlib.suppress(OSError):
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        s.shutdown(socket.SHUT_RD)
                else:
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)
