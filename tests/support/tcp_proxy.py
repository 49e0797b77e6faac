"""A TCP proxy a test can cut: one service process reaches PostgreSQL through it, and the test
makes the database unreachable for that process alone.

``cut()`` closes every proxied connection and refuses new ones (accepted, then closed at once:
what a client sees from a server that is restarting); ``restore()`` forwards again.
``reply_delay_s`` holds every piece of the upstream's answer that long before passing it on: a
slow server (a Redis that answers in 90 ms).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class TcpProxy:
    def __init__(self, *, upstream_host: str, upstream_port: int, reply_delay_s: float = 0.0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.reply_delay_s = reply_delay_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = threading.Event()
        self._stopped = threading.Event()
        self.refused = 0  # connections refused while cut

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

    def restore(self) -> None:
        self._cut.clear()

    def stop(self) -> None:
        self._stopped.set()
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
            try:
                server = self._connect_upstream()
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._open |= {client, server}
            for src, dst, delay in ((client, server, 0.0), (server, client, self.reply_delay_s)):
                threading.Thread(target=self._pipe, args=(src, dst, delay), daemon=True).start()

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

    def _pipe(self, src: socket.socket, dst: socket.socket, delay_s: float) -> None:
        try:
            while data := src.recv(65536):
                if delay_s:
                    time.sleep(delay_s)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)
