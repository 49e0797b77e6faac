"""Egress proxies (FR-28, docs/egress.md): target fetches, robots.txt and webhooks may leave
through an HTTP CONNECT proxy (``SCRAPEJOBS_EGRESS_PROXY``, a domain policy's override,
``SCRAPEJOBS_WEBHOOK_EGRESS_PROXY``).

Every request is tunnelled with ``CONNECT``, plain ``http://`` targets too: a forwarding proxy
(``GET http://name/``) would resolve the name itself, past the address guard. Here the guard
resolves and judges the target's name (``apps.outbound.connections``) and the ``CONNECT`` names
the vetted address; the ``Host`` header and the TLS name keep the name. The proxy's own address is
the operator's choice: it is not judged.

A proxy's credentials live in its URL; ``EgressProxy`` never shows them (``str``, ``repr``,
error messages: ``http://user:***@proxy:3128``).
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit


class ProxyFailed(Exception):
    """The proxy could not be reached or would not open the tunnel: a temporary failure of the
    proxy (``proxy_error``), not of the target. The message names no proxy user or host (it
    reaches the tenant's job and ``/readyz``); ``proxy`` is which one, for the operator's log."""

    def __init__(self, message: str, *, proxy: EgressProxy | None = None):
        super().__init__(message)
        self.proxy = proxy


class ProxyAuthFailed(ProxyFailed):
    """The proxy answered 407: its credentials are wrong or missing, a configuration error no
    retry cures (``proxy_auth``)."""


@dataclass(frozen=True)
class EgressProxy:
    scheme: str  # "http" or "https" (TLS to the proxy itself)
    host: str
    port: int
    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)

    @property
    def masked(self) -> str:
        who = f"{self.username}:***@" if self.username or self.password else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{who}{host}:{self.port}"

    def __str__(self) -> str:
        # What an error text may say of it: the tenant's job and /readyz never learn the proxy's
        # user or host (``masked`` is for the operator's log and the admin).
        return "the egress proxy"

    def __repr__(self) -> str:
        return f"EgressProxy({self.masked})"

    def authorization(self) -> str | None:
        """The ``Proxy-Authorization`` value (Basic), None without credentials."""
        if not self.username and not self.password:
            return None
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


def proxy_url_error(value: str) -> str | None:
    """Why ``value`` is not a usable proxy URL (None when it is). Says nothing of its password."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return "not a URL with a valid port"
    if parts.scheme not in ("http", "https"):
        return "the scheme must be http:// or https://"
    if not parts.hostname:
        return "no proxy host"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "a proxy URL has no path, query or fragment"
    if port == 0:
        return "port 0"
    return None


@functools.lru_cache(maxsize=256)
def egress_proxy_parse(value: str) -> EgressProxy | None:
    """The proxy a URL names; None for an empty value. Raises ValueError on a bad one (settings
    and the domain policy's form check it first)."""
    value = value.strip()
    if not value:
        return None
    error = proxy_url_error(value)
    if error is not None:
        raise ValueError(f"unusable egress proxy URL: {error}")
    parts = urlsplit(value)
    return EgressProxy(
        scheme=parts.scheme,
        host=parts.hostname or "",
        port=parts.port or (443 if parts.scheme == "https" else 80),
        username=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
    )


def proxy_url_masked(value: str) -> str:
    """``value`` with its password hidden, for showing a configured URL (admin, logs)."""
    try:
        proxy = egress_proxy_parse(value)
    except ValueError:
        return "(unusable proxy URL)"
    return proxy.masked if proxy is not None else value
