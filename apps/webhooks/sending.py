"""One webhook POST, bounded in time and refused for private addresses.

The callback is a third party like any target: it may be slow, hostile or point inside our
network. So the host is resolved once, its addresses are checked with the fetcher's rule
(``apps.outbound.addresses``), and the connection goes to a checked address (a second DNS answer
cannot swap in 127.0.0.1);
TLS still verifies the certificate against the host name. The whole call (connect, send, answer)
is bounded by a timer that shuts the socket down: socket timeouts alone bound each read, not a
callback that drips one byte a second.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from apps.outbound.addresses import AddressRefused, resolve_allowed

USER_AGENT = "scrapejobs-webhooks/1.0"
# We read a little of the answer (it is logged), never the whole of a hostile one.
MAX_ANSWER_BYTES = 4096


@dataclass(frozen=True)
class PostOutcome:
    status_code: int | None
    duration_ms: int
    error: str | None = None
    # No retry can help: the address is refused or the URL is unusable.
    permanent: bool = False

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def _resolve(host: str, port: int) -> str:
    """The first address of ``host`` the private-address rule allows (the fetcher's rule,
    ``SCRAPEJOBS_ALLOW_PRIVATE_TARGETS`` included); raises AddressRefused or OSError."""
    # Bounded like the connect: a callback whose DNS never answers costs one connect timeout.
    timeout = settings.SCRAPEJOBS_WEBHOOK_CONNECT_TIMEOUT_S
    _family, sockaddr = resolve_allowed(host, port, timeout_s=timeout)[0]
    return str(sockaddr[0])


def webhook_post(*, url: str, body: bytes, headers: dict[str, str]) -> PostOutcome:
    """POST ``body`` to ``url``; never raises, never takes much longer than
    ``SCRAPEJOBS_WEBHOOK_TIMEOUT_S``. Redirects are not followed (a 3xx is a failed attempt)."""
    started = time.monotonic()
    total = settings.SCRAPEJOBS_WEBHOOK_TIMEOUT_S
    connect_timeout = min(settings.SCRAPEJOBS_WEBHOOK_CONNECT_TIMEOUT_S, total)

    def elapsed_ms() -> int:
        return int((time.monotonic() - started) * 1000)

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return PostOutcome(None, 0, f"unusable callback url {url!r}", permanent=True)
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    sock: socket.socket | None = None
    watchdog: threading.Timer | None = None
    try:
        ip = _resolve(host, port)
        sock = socket.create_connection((ip, port), timeout=connect_timeout)
        if parts.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        remaining = max(total - (time.monotonic() - started), 0.01)
        sock.settimeout(remaining)
        # The hard bound: whatever the callback does, the socket is shut at the deadline.
        watchdog = threading.Timer(remaining, _shut, args=(sock,))
        watchdog.daemon = True
        watchdog.start()
        conn = http.client.HTTPConnection(host, port)
        conn.sock = sock  # already connected to the checked address
        host_header = host if parts.port is None else f"{host}:{parts.port}"
        conn.putrequest("POST", path, skip_host=True, skip_accept_encoding=True)
        for name, value in {
            "Host": host_header,
            "User-Agent": USER_AGENT,
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
            "Connection": "close",
            **headers,
        }.items():
            conn.putheader(name, value)
        conn.endheaders(body)
        response = conn.getresponse()
        answer = response.read(MAX_ANSWER_BYTES)
        error = None if 200 <= response.status < 300 else f"HTTP {response.status}: {answer[:200]!r}"
        return PostOutcome(response.status, elapsed_ms(), error)
    except AddressRefused as exc:
        return PostOutcome(None, elapsed_ms(), str(exc), permanent=True)
    except (OSError, http.client.HTTPException) as exc:
        if time.monotonic() - started >= total:
            return PostOutcome(None, elapsed_ms(), f"timed out after {total:g}s")
        return PostOutcome(None, elapsed_ms(), f"{type(exc).__name__}: {exc}")
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if sock is not None:
            sock.close()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
