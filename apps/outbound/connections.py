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

- **Egress proxy** (``apps.outbound.proxies``, docs/egress.md): through a proxy the peer of the
  socket is the proxy, so ``_ProxiedConnectionMixin._new_conn`` judges the target's name itself
  (the same ``resolve_allowed``) and tunnels with ``CONNECT <vetted address>:<port>``; the Host
  header and the TLS name (SNI, certificate check) keep the name.

``pool_manager(proxy=...)`` gives the process's pool manager for these connections, one per proxy
(a tunnelled connection is never reused for another proxy or a direct request): no retries, and
redirects are the caller's business (pass ``redirect=False``).
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import Any

import urllib3
from django.conf import settings
from urllib3.connection import HTTPConnection, HTTPSConnection, _ssl_wrap_socket_and_match_hostname
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
from apps.outbound.proxies import EgressProxy, ProxyAuthFailed, ProxyFailed

# The most a proxy's answer to CONNECT may hold before its blank line.
_MAX_CONNECT_ANSWER = 16 * 1024
# Answers of a proxy that could not reach the address it was given: the next one is tried.
_PROXY_UNREACHABLE = frozenset({502, 503, 504})


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

    def _resolved(self) -> tuple[list[tuple[int, Any]], RequestContext | None, float | None]:
        """The allowed addresses of the host (raises when none is), the request's context and
        the connect timeout: what every way of connecting starts from."""
        host = self._dns_host  # type: ignore[attr-defined]
        ctx = current_context()
        connect_timeout = self.timeout if isinstance(self.timeout, int | float) else None
        try:
            candidates = resolve_allowed(
                host.strip("[]"), self.port, timeout_s=_time_left(connect_timeout, ctx)
            )
        except socket.gaierror as e:
            raise NameResolutionError(self.host, self, e) from e  # type: ignore[arg-type]
        return candidates, ctx, connect_timeout

    def _new_conn(self) -> socket.socket:
        candidates, ctx, connect_timeout = self._resolved()
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


class _ProxiedConnectionMixin(_GuardedConnectionMixin):
    """A guarded connection through ``egress_proxy`` (set on the class by ``_pool_classes``)."""

    egress_proxy: EgressProxy

    def _new_conn(self) -> socket.socket:
        # The target is judged here, by its name: the socket's peer will be the proxy.
        candidates, ctx, connect_timeout = self._resolved()
        failure: ProxyFailed | None = None
        for _family, sockaddr in candidates:
            sock = self._proxy_socket(_time_left(connect_timeout, ctx), ctx)
            try:
                self._tunnel_open(sock, address=sockaddr[0])
                return sock
            except ProxyAuthFailed:
                sock.close()
                raise
            except ProxyFailed as e:
                sock.close()
                failure = e  # the proxy could not reach this address: the next one
            except BaseException:
                sock.close()
                raise
        raise failure or ProxyFailed(
            f"the egress proxy opened no tunnel to {self.host}", proxy=self.egress_proxy
        )

    def _proxy_socket(self, timeout: float | None, ctx: RequestContext | None) -> socket.socket:
        proxy = self.egress_proxy
        if timeout is not None and timeout <= 0:
            raise ConnectTimeoutError(self, f"no time left to connect to {self.host}")
        try:
            sock = socket.create_connection((proxy.host, proxy.port), timeout=timeout)
        except TimeoutError as e:
            raise ProxyFailed(f"the egress proxy did not answer within {timeout:.1f} s", proxy=proxy) from e
        except OSError as e:
            raise ProxyFailed(f"the egress proxy is unreachable: {e}", proxy=proxy) from e
        if ctx is not None and ctx.interrupt is not None:
            ctx.interrupt.watch(conn=self, connecting=sock)  # type: ignore[arg-type]
        _set_socket_options(sock, self.socket_options)
        if proxy.scheme != "https":
            return sock
        try:
            return ssl.create_default_context().wrap_socket(sock, server_hostname=proxy.host)
        except (OSError, ssl.SSLError) as e:
            sock.close()
            raise ProxyFailed(
                f"TLS to the egress proxy failed: {getattr(e, 'reason', None) or type(e).__name__}",
                proxy=proxy,
            ) from e

    def _tunnel_open(self, sock: socket.socket, *, address: str) -> None:
        proxy = self.egress_proxy
        target = f"[{address}]:{self.port}" if ":" in address else f"{address}:{self.port}"
        lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
        authorization = proxy.authorization()
        if authorization:
            lines.append(f"Proxy-Authorization: {authorization}")
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("ascii"))
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    raise ProxyFailed(
                        "the egress proxy closed the connection before answering CONNECT", proxy=proxy
                    )
                answer += chunk
                if len(answer) > _MAX_CONNECT_ANSWER:
                    raise ProxyFailed("the egress proxy sent an oversized answer to CONNECT", proxy=proxy)
        except TimeoutError as e:
            raise ProxyFailed("the egress proxy did not answer CONNECT in time", proxy=proxy) from e
        except OSError as e:
            raise ProxyFailed(f"the egress proxy broke off CONNECT: {e}", proxy=proxy) from e
        head, _, rest = answer.partition(b"\r\n\r\n")
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        status = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else 0
        if status == 407:
            raise ProxyAuthFailed("the egress proxy refused its credentials (407)", proxy=proxy)
        if not 200 <= status < 300:
            kind = "could not reach" if status in _PROXY_UNREACHABLE else "refused a tunnel to"
            raise ProxyFailed(
                f"the egress proxy {kind} {self.host} ({status_line.strip()[:100]})", proxy=proxy
            )
        if rest:
            raise ProxyFailed("the egress proxy sent data before the tunnel was open", proxy=proxy)


class _GuardedHTTPConnection(_GuardedConnectionMixin, HTTPConnection):
    pass


class _GuardedHTTPSConnection(_GuardedConnectionMixin, HTTPSConnection):
    pass


class _ProxiedHTTPConnection(_ProxiedConnectionMixin, HTTPConnection):
    pass


class _ProxiedHTTPSConnection(_ProxiedConnectionMixin, HTTPSConnection):
    def connect(self) -> None:
        if self.egress_proxy.scheme != "https":
            super().connect()  # TLS to the target over the plain tunnel, by its name
            return
        # TLS to the target inside TLS to the proxy: urllib3 does it (tls_in_tls) only for its
        # own proxies, so here it is asked for directly, with the connection's TLS settings.
        sock = self._new_conn()
        wrapped = _ssl_wrap_socket_and_match_hostname(
            sock=sock,
            cert_reqs=self.cert_reqs,
            ssl_version=self.ssl_version,
            ssl_minimum_version=self.ssl_minimum_version,
            ssl_maximum_version=self.ssl_maximum_version,
            ca_certs=self.ca_certs,
            ca_cert_dir=self.ca_cert_dir,
            ca_cert_data=self.ca_cert_data,
            cert_file=self.cert_file,
            key_file=self.key_file,
            key_password=self.key_password,
            server_hostname=self.host.rstrip("."),
            ssl_context=self.ssl_context,
            tls_in_tls=True,
            assert_hostname=self.assert_hostname,
            assert_fingerprint=self.assert_fingerprint,
        )
        self.sock = wrapped.socket  # type: ignore[assignment]
        self.is_verified = wrapped.is_verified


class _GuardedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


def _pool_classes(proxy: EgressProxy | None) -> dict[str, type[HTTPConnectionPool]]:
    if proxy is None:
        return {"http": _GuardedHTTPConnectionPool, "https": _GuardedHTTPSConnectionPool}
    http_conn = type("_ViaProxyHTTPConnection", (_ProxiedHTTPConnection,), {"egress_proxy": proxy})
    https_conn = type("_ViaProxyHTTPSConnection", (_ProxiedHTTPSConnection,), {"egress_proxy": proxy})
    return {
        "http": type("_ViaProxyHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": http_conn}),
        "https": type("_ViaProxyHTTPSConnectionPool", (HTTPSConnectionPool,), {"ConnectionCls": https_conn}),
    }


_managers: dict[tuple[bool, EgressProxy | None], urllib3.PoolManager] = {}
_managers_lock = threading.Lock()


def pool_manager(*, proxy: EgressProxy | None = None) -> urllib3.PoolManager:
    """One pool manager per process (keep-alive across requests to the same origin), and one per
    value of ALLOW_PRIVATE_TARGETS: a pooled connection opened while private targets were
    allowed must never be reused once they are not; and one per egress proxy (None: direct)."""
    allow = private_targets_allowed()
    with _managers_lock:
        pm = _managers.get((allow, proxy))
        if pm is None:
            pm = urllib3.PoolManager(
                num_pools=200,
                maxsize=max(int(settings.SCRAPEJOBS_WORKER_CONCURRENCY), 1),
                block=False,
                retries=False,
            )
            pm.pool_classes_by_scheme = _pool_classes(proxy)  # type: ignore[assignment]
            _managers[(allow, proxy)] = pm
        return pm
