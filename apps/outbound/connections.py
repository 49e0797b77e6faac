"""Guarded urllib3 connections, and the pool manager every outbound request goes through.

- **Address guard**: ``_GuardedConnectionMixin._new_conn`` resolves the host itself, checks each
  candidate address (``apps.outbound.addresses``), connects to the allowed ones in resolver order
  until one answers, and checks the socket's peer before a byte is sent. The check is on the
  address actually connected to, so a DNS answer that changes between a check and the connect
  cannot get through. HTTPS keeps SNI and certificate verification against the host name.
- **Timeouts**: the connect timeout (urllib3's ``Timeout.connect``) covers the name's resolution
  too (``getaddrinfo`` has no timeout of its own: see ``resolve_allowed(timeout_s=...)``), and is
  shortened to what is left of the request's deadline (``apps.outbound.interrupt``).
- **Interruption**: a connection tells the request's ``FetchInterrupt`` which socket it is
  connecting or sending on, so that ``fire()`` can break it off.

``pool_manager()`` gives the process's pool manager for these connections: no retries, and
redirects are the caller's business (pass ``redirect=False``).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import urllib3
from django.conf import settings
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util.connection import _set_socket_options  # noqa: PLC2701 - what create_connection uses

from apps.outbound.addresses import (
    AddressRefused,
    is_allowed_address,
    private_targets_allowed,
    resolve_allowed,
)
from apps.outbound.interrupt import RequestContext, current_context


class _GuardedConnectionMixin:
    """Replaces urllib3's ``_new_conn`` (which lets the OS pick any address) with one that picks
    only allowed addresses and re-checks the peer of the connected socket."""

    host: str
    port: int
    timeout: Any
    socket_options: Any
    source_address: Any

    def request(self, *args: Any, **kwargs: Any) -> Any:
        # A reused (kept-alive) connection does not come through _new_conn.
        ctx = current_context()
        if ctx is not None and ctx.interrupt is not None:
            ctx.interrupt.watch(conn=self)  # type: ignore[arg-type]
        return super().request(*args, **kwargs)  # type: ignore[misc]

    def _new_conn(self) -> socket.socket:
        host = self._dns_host  # type: ignore[attr-defined]
        ctx = current_context()
        connect_timeout = self.timeout if isinstance(self.timeout, int | float) else None
        try:
            candidates = resolve_allowed(
                host.strip("[]"), self.port, timeout_s=_time_left(connect_timeout, ctx)
            )
        except socket.gaierror as e:
            raise NameResolutionError(self.host, self, e) from e  # type: ignore[arg-type]
        last: OSError | None = None
        for family, sockaddr in candidates:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                if ctx is not None and ctx.interrupt is not None:
                    ctx.interrupt.watch(conn=self, connecting=sock)  # type: ignore[arg-type]
                _set_socket_options(sock, self.socket_options)
                timeout = _time_left(connect_timeout, ctx)
                if timeout is not None:
                    if timeout <= 0:
                        raise TimeoutError("no time left to connect")
                    sock.settimeout(timeout)
                if self.source_address:
                    sock.bind(self.source_address)
                sock.connect(sockaddr)
                # The address we are really talking to, whatever resolved to what above.
                peer = sock.getpeername()[0]
                if not is_allowed_address(peer):
                    raise AddressRefused(f"{self.host} connected to refused address {peer}")
                return sock
            except TimeoutError as e:
                sock.close()
                raise ConnectTimeoutError(
                    self, f"connection to {self.host} timed out (connect timeout={self.timeout})"
                ) from e
            except OSError as e:
                sock.close()
                last = e
            except BaseException:
                sock.close()
                raise
        raise NewConnectionError(self, f"failed to establish a new connection: {last}")  # type: ignore[arg-type]


def _time_left(connect_timeout: float | None, ctx: RequestContext | None) -> float | None:
    """The connect timeout, shortened to what is left of the request's deadline (resolution and
    connect share it)."""
    if ctx is None:
        return connect_timeout
    left = ctx.deadline - time.monotonic()
    return left if connect_timeout is None else min(connect_timeout, left)


class _GuardedHTTPConnection(_GuardedConnectionMixin, HTTPConnection):
    pass


class _GuardedHTTPSConnection(_GuardedConnectionMixin, HTTPSConnection):
    pass


class _GuardedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


_managers: dict[bool, urllib3.PoolManager] = {}
_managers_lock = threading.Lock()


def pool_manager() -> urllib3.PoolManager:
    """One pool manager per process (keep-alive across requests to the same origin), and one per
    value of ALLOW_PRIVATE_TARGETS: a pooled connection opened while private targets were
    allowed must never be reused once they are not."""
    allow = private_targets_allowed()
    with _managers_lock:
        pm = _managers.get(allow)
        if pm is None:
            pm = urllib3.PoolManager(
                num_pools=200,
                maxsize=max(int(settings.SCRAPEJOBS_WORKER_CONCURRENCY), 1),
                block=False,
                retries=False,
            )
            pm.pool_classes_by_scheme = {  # type: ignore[assignment]
                "http": _GuardedHTTPConnectionPool,
                "https": _GuardedHTTPSConnectionPool,
            }
            _managers[allow] = pm
        return pm
