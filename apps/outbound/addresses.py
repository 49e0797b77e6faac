"""Which network addresses a target (or a callback) may be fetched from (FR-1 to FR-7).

Targets are untrusted: a URL naming ``localhost``, a private network, a link-local or cloud
metadata address would let a tenant read our own infrastructure (SSRF). The rule is applied to
the IP address actually connected to, not to the URL's text: ``apps.outbound.connections``
resolves the name itself, checks each candidate here, connects to an allowed one and checks the
socket's peer, so a DNS answer that changes between a check and the connect (rebinding) cannot get
through. Intake also uses ``is_public_address`` to refuse literal private addresses up front.

``SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=true`` (development and tests) turns the rule off;
``SCRAPEJOBS_ALLOWED_TARGET_NETWORKS`` lets named networks through while it stays on (an internal
site an operator means to scrape, or a test's own loopback target beside a refused one).

Resolution can be bounded (``timeout_s``): ``socket.getaddrinfo`` has no timeout of its own, and a
stuck resolver would otherwise hold a worker past its job's deadline. The lookup runs on a shared
thread pool and the caller waits at most ``timeout_s``; a lookup that overstays is abandoned (its
thread finishes whenever the resolver gives up) and reported as ``EAI_AGAIN``, a temporary failure.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Not covered by the ipaddress flags below, named explicitly.
_CGNAT = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598): a provider's inside
_METADATA = {
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack... (also link-local)
    ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6 (also unique-local)
    ipaddress.ip_address("168.63.129.16"),  # Azure's host service (metadata, DNS, health): public space
}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # well-known NAT64 prefix: carries an IPv4 address

# (family, sockaddr) pairs, as socket.getaddrinfo gives them.
AddrInfo = tuple[int, tuple[Any, ...]]
Resolver = Callable[[str, int], list[AddrInfo]]


class AddressRefused(Exception):
    """The target resolves only to addresses we refuse to connect to."""


def is_public_address(ip: str | IPAddress) -> bool:
    """True when ``ip`` is a globally routable unicast address that is not a metadata endpoint.

    IPv6 addresses that embed an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, NAT64, 6to4,
    Teredo) are judged by the IPv4 address they carry, since that is where the packets end up.
    """
    addr = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
    if addr in _METADATA:
        return False
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.scope_id:  # fe80::1%eth0 and the like: link-scoped by definition
            return False
        embedded = addr.ipv4_mapped or addr.sixtofour or (addr.teredo[1] if addr.teredo else None)
        if embedded is None and addr in _NAT64:
            embedded = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public_address(embedded)
    if isinstance(addr, ipaddress.IPv4Address) and addr in _CGNAT:
        return False
    return not (
        addr.is_private
        or addr.is_loopback
        or addr.is_link_local
        or addr.is_multicast
        or addr.is_reserved
        or addr.is_unspecified
        or _is_site_local(addr)
    ) and bool(addr.is_global)


def _is_site_local(addr: IPAddress) -> bool:
    # fec0::/10, deprecated but still routed by some stacks; ipaddress keeps it out of is_private.
    return isinstance(addr, ipaddress.IPv6Address) and addr.is_site_local


def private_targets_allowed() -> bool:
    """Read at each call (not import) so an operator's setting, or a test's override, applies."""
    return bool(settings.SCRAPEJOBS_ALLOW_PRIVATE_TARGETS)


def is_allowed_address(ip: str | IPAddress) -> bool:
    if private_targets_allowed() or is_public_address(ip):
        return True
    networks = settings.SCRAPEJOBS_ALLOWED_TARGET_NETWORKS
    if not networks:
        return False
    addr = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
    return any(addr.version == net.version and addr in net for net in networks)


def system_resolve(host: str, port: int) -> list[AddrInfo]:
    """Every (family, sockaddr) the host name resolves to, TCP only. Raises socket.gaierror."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [(family, sockaddr) for family, _type, _proto, _canon, sockaddr in infos]


def resolve_allowed(
    host: str, port: int, *, resolver: Resolver | None = None, timeout_s: float | None = None
) -> list[AddrInfo]:
    """The resolved addresses of ``host`` we may connect to, in resolver order.

    Raises ``socket.gaierror`` when the name does not resolve (``EAI_AGAIN`` when it took longer
    than ``timeout_s``; None waits as long as the resolver does) and ``AddressRefused`` when
    every address it resolves to is refused. ``resolver`` defaults to ``system_resolve`` (looked
    up at call time so tests can stand in a stub for the DNS)."""
    resolve = resolver or system_resolve
    answers = resolve(host, port) if timeout_s is None else _resolve_within(resolve, host, port, timeout_s)
    allowed = [(family, sockaddr) for family, sockaddr in answers if is_allowed_address(_ip_of(sockaddr))]
    if not allowed:
        shown = ", ".join(sorted({_ip_of(s) for _f, s in answers})) or "nothing"
        raise AddressRefused(f"{host} resolves to {shown}: refused (private, loopback, or reserved)")
    return allowed


def _resolve_within(resolve: Resolver, host: str, port: int, timeout_s: float) -> list[AddrInfo]:
    future = _resolver_pool().submit(resolve, host, port)
    # wait() rather than result(timeout=...): a resolver that itself raises TimeoutError must not
    # be mistaken for our bound.
    concurrent.futures.wait([future], timeout=max(timeout_s, 0.0))
    if not future.done():
        # Abandoned, not joined: a thread stuck in getaddrinfo cannot be stopped. cancel() keeps a
        # lookup still queued behind stuck ones from starting at all.
        future.cancel()
        raise socket.gaierror(socket.EAI_AGAIN, f"resolving {host} took longer than {timeout_s:.1f}s")
    return future.result()


_pool: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _resolver_pool() -> concurrent.futures.ThreadPoolExecutor:
    """One pool per process (a forked child gets its own: threads do not survive fork), as wide
    as the worker's concurrency so that a few stuck lookups cannot queue up every other fetch's.
    Threads are started only when none is idle, so a healthy resolver keeps a handful."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            width = max(int(settings.SCRAPEJOBS_WORKER_CONCURRENCY), 4)
            _pool = (os.getpid(), concurrent.futures.ThreadPoolExecutor(width, thread_name_prefix="resolve"))
        return _pool[1]


def _ip_of(sockaddr: tuple[Any, ...]) -> str:
    return str(sockaddr[0]).split("%", 1)[0]
