"""One webhook POST, bounded in time and refused for private addresses.

The callback is a third party like any target: it may be slow, hostile or point inside our
network. So the call goes through the fetcher's guarded connection pool
(``apps.outbound.connections``): the host is resolved there, only the addresses the fetcher's rule
allows are connected to (each in turn, until one answers), and the connected socket's peer is
checked before a byte is sent, so a second DNS answer cannot swap in 127.0.0.1. TLS verifies the
certificate against the host name. Redirects are not followed: a 3xx is the answer.

Time: the name's resolution and the connect share ``SCRAPEJOBS_WEBHOOK_CONNECT_TIMEOUT_S``, and
the whole call (connect, send, answer) is bounded by ``SCRAPEJOBS_WEBHOOK_TIMEOUT_S``. Socket
timeouts alone bound each read, not a callback that drips one byte a second, so a timer fires the
call's ``FetchInterrupt`` at the deadline, which shuts its socket down.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import urllib3
from django.conf import settings
from urllib3.exceptions import HTTPError
from urllib3.util import SKIP_HEADER

from apps.outbound.addresses import AddressRefused
from apps.outbound.connections import pool_manager
from apps.outbound.interrupt import FetchInterrupt, Interrupted, request_context
from apps.outbound.proxies import ProxyFailed, egress_proxy_parse
from apps.scraping.errors import parse_retry_after

USER_AGENT = "scrapejobs-webhooks/1.0"
# We read a little of the answer (it is logged), never the whole of a hostile one.
MAX_ANSWER_BYTES = 4096
# The answers whose Retry-After the next attempt honours (Standard Webhooks, FR-23).
RETRY_AFTER_STATUSES = frozenset((429, 502, 503, 504))


@dataclass(frozen=True)
class PostOutcome:
    status_code: int | None
    duration_ms: int
    error: str | None = None
    # No retry can help: the address is refused or the URL is unusable.
    permanent: bool = False
    # Seconds the receiver asked us to wait (Retry-After on a 429/502/503/504).
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


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
    request_headers = _request_headers(host=parts.hostname, port=parts.port, body=body, headers=headers)

    interrupt = FetchInterrupt()
    # The hard bound: whatever the callback does, its socket is shut at the deadline.
    watchdog = threading.Timer(total, interrupt.fire)
    watchdog.daemon = True
    watchdog.start()
    response: urllib3.BaseHTTPResponse | None = None
    try:
        with request_context(interrupt=interrupt, deadline=started + total):
            # SCRAPEJOBS_WEBHOOK_EGRESS_PROXY (FR-28): apart from the targets' proxy.
            proxy = egress_proxy_parse(settings.SCRAPEJOBS_WEBHOOK_EGRESS_PROXY)
            response = pool_manager(proxy=proxy).urlopen(
                "POST",
                url,
                body=body,
                headers=request_headers,
                redirect=False,
                retries=False,
                preload_content=False,
                decode_content=False,
                timeout=urllib3.Timeout(
                    connect=connect_timeout, read=max(total - (time.monotonic() - started), 0.01)
                ),
            )
            answer = response.read(MAX_ANSWER_BYTES)
        return _answered(response, answer, duration_ms=elapsed_ms())
    except AddressRefused as exc:
        return PostOutcome(None, elapsed_ms(), str(exc), permanent=True)
    except ProxyFailed as exc:  # the proxy's failure (a 407 too): retried, as any delivery is
        return PostOutcome(None, elapsed_ms(), str(exc))
    except (HTTPError, OSError, http.client.HTTPException, Interrupted) as exc:
        if time.monotonic() - started >= total:
            return PostOutcome(None, elapsed_ms(), f"timed out after {total:g}s")
        return PostOutcome(None, elapsed_ms(), f"{type(exc).__name__}: {exc}")
    finally:
        watchdog.cancel()
        # Let go of the connection before it goes back to the pool, where the timer must not
        # reach it; closed first, as the call asked for (Connection: close).
        interrupt.forget()
        if response is not None:
            response.close()
            response.release_conn()


def _request_headers(*, host: str, port: int | None, body: bytes, headers: dict[str, str]) -> dict[str, str]:
    return {
        "Host": host if port is None else f"{host}:{port}",
        "User-Agent": USER_AGENT,
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
        "Connection": "close",
        # No Accept-Encoding: the answer is logged as it comes (urllib3 would add one otherwise).
        "Accept-Encoding": SKIP_HEADER,
        **headers,
    }


def _answered(response: urllib3.BaseHTTPResponse, answer: bytes, *, duration_ms: int) -> PostOutcome:
    """The outcome of a call the receiver answered: ok on a 2xx, else its status and the start of
    its answer, with the pause it asked for on a 429, 502, 503 or 504 (FR-23)."""
    error = None if 200 <= response.status < 300 else f"HTTP {response.status}: {answer[:200]!r}"
    retry_after = (
        parse_retry_after(response.headers.get("Retry-After"))
        if response.status in RETRY_AFTER_STATUSES
        else None
    )
    return PostOutcome(response.status, duration_ms, error, retry_after_s=retry_after)
