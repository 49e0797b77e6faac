"""How a fetch fails: ``FetchError`` and the failure classes of NFR-3.

What counts as success: a 2xx answer whose body was read completely. Every other status is a
failure and its body is not stored: redirects are followed, so a 3xx that is left over (304,
300, a redirect without Location) is ``invalid_response``; 4xx/5xx are ``http_<status>``.

``permanent`` says whether another attempt could help:

=====================  =========  ============================================================
error_class            permanent  when
=====================  =========  ============================================================
timeout                no         connect, read, or the overall deadline passed
connection_error       no         refused, reset, closed early (incomplete body)
dns_error              no         the name does not resolve (often a transient DNS failure), or
                                  its resolution outlasted the connect timeout
interrupted            no         ``FetchInterrupt.fire()`` stopped it and ``check`` gave no reason
proxy_error            no         the egress proxy was unreachable or would not open the tunnel
                                  (not the target's doing: the target's adaptive rate is untouched)
robots_unavailable     no         the host's robots.txt answered 5xx or could not be fetched: all
                                  is disallowed for a while (RFC 9309); Retry-After kept
http_408, http_429     no         408 Request Timeout, 429 Too Many Requests (Retry-After kept)
http_5xx (exact code)  no         500-599 except 501 and 505 (Retry-After kept)
http_<other>           yes        400, 401, 403, 404, 410, 422, 501, 505 and every other status
tls_error              yes        handshake or certificate failure
too_many_redirects     yes        more hops than the limit
body_too_large         yes        body (or its Content-Length) over the limit
address_refused        yes        the target resolves only to refused addresses
invalid_response       yes        malformed answer, undecodable body, unusable 3xx, bad Location
invalid_url            yes        a URL urllib3 cannot use (intake validates first)
robots_disallowed      yes        the host's robots.txt disallows the URL; it was not requested
proxy_auth             yes        the egress proxy answered 407: its credentials are wrong
redirect_deferred      (none)     not a failure: a redirect hop's domain had no turn; the attempt
                                  is ``deferred`` and not counted (apps.scraping.redirect_hops)
=====================  =========  ============================================================
"""

from __future__ import annotations

import email.utils
import logging
import time

from urllib3.exceptions import (
    ConnectTimeoutError,
    DecodeError,
    HTTPError,
    LocationParseError,
    LocationValueError,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

from apps.outbound.addresses import AddressRefused
from apps.outbound.proxies import ProxyAuthFailed, ProxyFailed

logger = logging.getLogger(__name__)

# The longest wait a target's Retry-After can impose on one retry.
RETRY_AFTER_CAP_S = 86400.0


class FetchError(Exception):
    """A failed fetch, classified (see the module docstring's table)."""

    def __init__(
        self,
        error_class: str,
        message: str,
        *,
        permanent: bool,
        http_status: int | None = None,
        retry_after_s: float | None = None,
    ):
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.permanent = permanent
        self.http_status = http_status
        self.retry_after_s = retry_after_s
        # The URL whose host gave this answer (set by the fetcher; after a redirect, another
        # host than the job's): its domain's adaptive rate is the one the answer moves.
        self.url: str | None = None

    def __repr__(self) -> str:
        return f"FetchError({self.error_class!r}, {self.message!r}, permanent={self.permanent})"


def status_error(status: int, reason: str = "", retry_after: str | None = None) -> FetchError:
    """The failure a non-2xx final status stands for."""
    temporary = status in (408, 429) or (500 <= status <= 599 and status not in (501, 505))
    return FetchError(
        f"http_{status}",
        f"target answered {status} {reason}".strip(),
        permanent=not temporary,
        http_status=status,
        retry_after_s=parse_retry_after(retry_after) if temporary else None,
    )


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from ``now``: delta-seconds or an HTTP date; None if unusable.
    Capped at ``RETRY_AFTER_CAP_S`` so a hostile target cannot park a job for a year."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP date is GMT by definition
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_S)


def classify(e: BaseException) -> FetchError:
    """The FetchError an exception out of urllib3 (or the guard) stands for."""
    if isinstance(e, FetchError):
        return e
    if isinstance(e, AddressRefused):
        return FetchError("address_refused", str(e), permanent=True)
    # The egress proxy's failures are the proxy's, not the target's (docs/egress.md).
    if isinstance(e, ProxyFailed):
        # The job's error names no proxy user or host; the operator's log says which proxy.
        logger.warning("egress proxy %r: %s", e.proxy, e)
        if isinstance(e, ProxyAuthFailed):
            return FetchError("proxy_auth", str(e), permanent=True)
        return FetchError("proxy_error", str(e), permanent=False)
    if isinstance(e, NameResolutionError):
        return FetchError("dns_error", f"name did not resolve: {e.__cause__ or e}", permanent=False)
    # NewConnectionError subclasses ConnectTimeoutError in urllib3 2: test it first.
    if isinstance(e, NewConnectionError):
        return FetchError("connection_error", str(e), permanent=False)
    if isinstance(e, ConnectTimeoutError | ReadTimeoutError | TimeoutError):
        return FetchError("timeout", f"timed out: {e}", permanent=False)
    if isinstance(e, SSLError):
        return FetchError("tls_error", str(e), permanent=True)
    if isinstance(e, DecodeError):
        return FetchError("invalid_response", f"undecodable body: {e}", permanent=True)
    if isinstance(e, LocationParseError | LocationValueError):
        return FetchError("invalid_url", str(e), permanent=True)
    if isinstance(e, ProtocolError):
        cause = e.args[1] if len(e.args) > 1 else e.__cause__
        if isinstance(cause, TimeoutError):
            return FetchError("timeout", f"timed out: {e}", permanent=False)
        if _is_bad_status_line(cause):
            return FetchError("invalid_response", f"malformed answer: {e}", permanent=True)
        return FetchError("connection_error", str(e), permanent=False)
    if isinstance(e, HTTPError | OSError):
        return FetchError("connection_error", str(e), permanent=False)
    raise e  # not a fetch failure: a bug, for the caller's catch-all


def _is_bad_status_line(cause: object) -> bool:
    import http.client  # noqa: PLC0415

    return isinstance(cause, http.client.BadStatusLine | http.client.LineTooLong) and not isinstance(
        cause, http.client.RemoteDisconnected
    )
