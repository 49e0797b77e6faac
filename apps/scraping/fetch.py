"""The fetcher: one HTTP request to an untrusted target, with every limit a worker needs.

urllib3 directly (no requests), through the guarded pool of ``apps.outbound.connections``, so
that the connection itself is guarded:

- **Address guard**: every connection, every redirect hop included, goes only to addresses the
  guard allows, checked on the socket's peer (``apps.outbound.connections``).
- **Timeouts**: connect = min(``SCRAPEJOBS_FETCH_CONNECT_TIMEOUT_S``, the job's ``timeout_s``),
  and it covers the name's resolution too; read = the time left; and one overall deadline of
  ``timeout_s`` for the whole fetch (redirects, headers and body), so a target that drips one
  byte at a time cannot hold a worker longer.
- **Stopping from outside**: ``check`` is called between hops and chunks, but a fetch can sit for
  minutes inside one read (waiting for headers, or for the next byte). ``FetchInterrupt.fire()``
  (``apps.outbound.interrupt``), from another thread, shuts the socket of the fetch's current
  connection down, so that read ends at once; the fetch then calls ``check`` again, which is
  expected to raise the reason (a cancel, a lost lease).
- **Redirects**: 301/302/303/307/308 are followed here, at most ``SCRAPEJOBS_FETCH_MAX_REDIRECTS``
  hops; 303 (and 301/302 after a POST) become GET without a body, as browsers do; credentials
  (Authorization, Cookie) are dropped when the origin changes.
- **Politeness on every hop**: with ``FetchRequest.charge_redirects`` a redirect hop takes a
  token (and, for another domain, a concurrency slot) of the host it goes to, or, refused, ends
  the fetch with ``RedirectDeferred`` (its place kept in that domain's line): the attempt is a
  deferral and the job starts again from its own URL then, instead of a worker thread waiting
  for the hop's turn (NFR-24); a hop within the group the fetch holds waits no more than that,
  and the job's next attempt goes on from that hop (``HopResume``). The first hop's permit is the worker's gate. With ``obey_robots`` every hop's URL is checked against its host's robots.txt
  (``apps.politeness.robots``, fetched once per TTL through this same fetcher): a disallowed URL
  fails with ``robots_disallowed`` before any request to it, an unreadable robots.txt with
  ``robots_unavailable`` (temporary).
- **Egress proxy**: each hop leaves through its host's proxy (``egress_proxy_for``), robots.txt
  too; the guard still judges the target (``apps.outbound.connections``).
- **Size**: at most ``SCRAPEJOBS_FETCH_MAX_BYTES`` of (decoded) body, refused up front when the
  Content-Length says so, otherwise when the running count passes it. The body is streamed in
  chunks; it is never held whole in memory.

Success is a 2xx answer whose body was read completely; every failure raises ``FetchError``,
classified as the table in ``apps.scraping.errors`` says (NFR-3).

This module sends the request and follows its hops; reading the answer within the limits is
``apps.scraping.fetched``'s, charging and resuming the hops ``apps.scraping.redirect_hops``', and
each hop's robots.txt verdict ``apps.scraping.hop_robots``'.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

import urllib3
from django.conf import settings

from apps.outbound.connections import pool_manager
from apps.outbound.interrupt import FetchInterrupt, RequestContext, request_context
from apps.outbound.proxies import EgressProxy, egress_proxy_parse
from apps.politeness.limiter import DEFAULT_SHARE, LineShare
from apps.politeness.models import EGRESS_DIRECT
from apps.politeness.robots import (
    MAX_ROBOTS_BYTES,
    ROBOTS_FETCH_TIMEOUT_S,
    RobotsAnswer,
)
from apps.politeness.selectors import domain_limits_get
from apps.scraping.errors import FetchError, status_error
from apps.scraping.fetched import (
    Fetched,
    FetchLimits,
    answered_by,
    fetch_failure,
    response_finish,
    time_left,
    too_large,
)
from apps.scraping.hop_robots import robots_check
from apps.scraping.redirect_hops import (
    HOP_RESUME_GRACE_S,
    HopResume,
    RedirectCharges,
    RedirectDeferred,
    hop_resume_keep,
    hop_resume_take,
)

logger = logging.getLogger(__name__)

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Headers the fetcher sets itself; a job's own values would break the request framing.
_DROPPED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
# Sent to the first origin only, as browsers and urllib3 do.
_ORIGIN_BOUND_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})


@dataclass(frozen=True)
class FetchRequest:
    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    timeout_s: float = 30.0
    obey_robots: bool = False
    charge_redirects: bool = False
    ticket: str = ""  # with charge_redirects: names the job in a hop domain's line
    # With charge_redirects and ticket: a redirect hop deferred by the job's previous attempt may
    # be kept to go on from (HopResume).
    resumable: bool = False
    share: LineShare = DEFAULT_SHARE  # and where it stands there (NFR-9, NFR-10)
    # A conditional request (FR-33, docs/revalidation.md): a 304 Not Modified is then an answer,
    # yielded like a 2xx (with no body), not an invalid response.
    conditional: bool = False


@contextmanager
def fetch_open(
    *,
    request: FetchRequest,
    limits: FetchLimits | None = None,
    check: Callable[[], None] | None = None,
    interrupt: FetchInterrupt | None = None,
) -> Iterator[Fetched]:
    """Send ``request``, following redirects, and yield the final 2xx answer for its body to be
    streamed (``Fetched.chunks()``). Raises ``FetchError`` for every failure; any exception
    raised by ``check`` (called between hops and chunks) stops the fetch and propagates.
    ``interrupt.fire()`` (another thread) breaks off a blocked read; ``check`` is then called to
    raise the reason, and if it does not the fetch fails with ``interrupted``.
    The connection goes back to the pool only when the body was read to its end."""
    limits = limits or FetchLimits.from_settings()
    check = check or _no_check
    deadline = time.monotonic() + request.timeout_s
    charges = (
        RedirectCharges(
            first_host=_host(request.url),
            ticket=request.ticket,
            share=request.share,
            slot_ttl_s=request.timeout_s + settings.SCRAPEJOBS_LEASE_S,
        )
        if request.charge_redirects
        else None
    )
    try:
        with request_context(interrupt=interrupt, deadline=deadline) as ctx:
            response, url = _open_final(request=request, limits=limits, check=check, ctx=ctx, charges=charges)
            fetched = Fetched(
                response=response, url=url, deadline=deadline, limits=limits, check=check, interrupt=interrupt
            )
            try:
                yield fetched
            finally:
                response_finish(response, reuse=fetched.complete, interrupt=interrupt)
    finally:
        if charges is not None:
            charges.release()


def _no_check() -> None:
    return None


@dataclass
class _Chain:
    """Where a fetch's redirect chain stands: the next hop's request, and what the hops before
    it changed (a switch to GET, origin-bound headers dropped), the resumed attempt's included."""

    method: str
    url: str
    body: bytes | None
    headers: dict[str, str]
    first: int = 0  # the hop the chain starts at: 0, or the resumed one
    to_get: bool = False
    cross_origin: bool = False


def _open_final(
    *,
    request: FetchRequest,
    limits: FetchLimits,
    check: Callable[[], None],
    ctx: RequestContext,
    charges: RedirectCharges | None,
) -> tuple[urllib3.BaseHTTPResponse, str]:
    """The final answer of ``request`` (a 2xx, or a 304 to a conditional request) and the URL
    that gave it, each redirect hop checked, charged and followed."""
    deadline, interrupt = ctx.deadline, ctx.interrupt
    chain = _chain_start(request, limits=limits, charges=charges)
    for hop in range(chain.first, limits.max_redirects + 1):
        check()
        _check_scheme(chain.url)
        if hop > chain.first and charges is not None:
            _hop_charge(charges, request=request, chain=chain, hop=hop)
        if request.obey_robots:
            robots_check(
                chain.url,
                host=_host(chain.url),
                deadline=deadline,
                fetch=lambda origin: _robots_fetch(
                    origin=origin, limits=limits, check=check, deadline=deadline
                ),
            )
        response = _send(chain, limits=limits, deadline=deadline, interrupt=interrupt, check=check)
        if _is_final(response, request=request, limits=limits, interrupt=interrupt):
            return response, chain.url
        _follow(response, chain=chain, interrupt=interrupt)
    raise FetchError("too_many_redirects", f"more than {limits.max_redirects} redirects", permanent=True)


def _chain_start(request: FetchRequest, *, limits: FetchLimits, charges: RedirectCharges | None) -> _Chain:
    """The first hop's request: the job's own, or the hop its previous attempt was deferred at."""
    method = request.method.upper()
    body: bytes | None = request.body.encode() if request.body is not None and method == "POST" else None
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED_HEADERS}
    if not any(k.lower() == "user-agent" for k in headers):
        headers["User-Agent"] = limits.user_agent
    chain = _Chain(method=method, url=request.url, body=body, headers=headers)
    resumed = (
        hop_resume_take(ticket=request.ticket)
        if charges is not None and request.ticket and request.resumable
        else None
    )
    if resumed is not None:  # what its hops changed goes with a deferral of this attempt too
        chain.to_get, chain.cross_origin = resumed.to_get, resumed.cross_origin
    if resumed is not None and resumed.url_from == request.url:
        # The previous attempt's chain stopped at this hop for want of its group's token: the
        # worker's gate has just taken this attempt's token of that group, for this hop.
        chain.first, chain.url = resumed.hop, resumed.url
        if resumed.to_get:
            chain.method, chain.body = "GET", None
            chain.headers = {k: v for k, v in chain.headers.items() if k.lower() != "content-type"}
        if resumed.cross_origin:
            chain.headers = {k: v for k, v in chain.headers.items() if k.lower() not in _ORIGIN_BOUND_HEADERS}
    return chain


def _hop_charge(charges: RedirectCharges, *, request: FetchRequest, chain: _Chain, hop: int) -> None:
    """Charge the hop to its domain; a hop refused within the group the fetch holds is kept for
    the job's next attempt to go on from (``HopResume``) before the deferral ends this one."""
    try:
        charges.charge(host=_host(chain.url))
    except RedirectDeferred as deferred:
        if deferred.same_group and request.ticket:
            hop_resume_keep(
                ticket=request.ticket,
                resume=HopResume(
                    url_from=request.url,
                    url=chain.url,
                    hop=hop,
                    to_get=chain.to_get,
                    cross_origin=chain.cross_origin,
                ),
                ttl_s=deferred.wait_s + HOP_RESUME_GRACE_S,
            )
        raise


def _send(
    chain: _Chain,
    *,
    limits: FetchLimits,
    deadline: float,
    interrupt: FetchInterrupt | None,
    check: Callable[[], None],
) -> urllib3.BaseHTTPResponse:
    """One hop's request, through the guarded pool and its host's egress proxy, its headers
    awaited within the time left."""
    remaining = time_left(deadline)
    timeout = urllib3.Timeout(connect=min(limits.connect_timeout_s, remaining), read=remaining)
    try:
        return pool_manager(proxy=egress_proxy_for(_host(chain.url))).request(
            chain.method,
            chain.url,
            body=chain.body,
            headers=chain.headers,
            redirect=False,
            retries=False,
            preload_content=False,
            decode_content=True,
            timeout=timeout,
        )
    except Exception as e:  # noqa: BLE001 - classified, never swallowed
        # urllib3 has already discarded the connection.
        if interrupt is not None:
            interrupt.forget()
        raise answered_by(fetch_failure(e, interrupt=interrupt, check=check), chain.url) from e


def _is_final(
    response: urllib3.BaseHTTPResponse,
    *,
    request: FetchRequest,
    limits: FetchLimits,
    interrupt: FetchInterrupt | None,
) -> bool:
    """Whether ``response`` is the fetch's answer: a 2xx (refused up front when its length is
    past the cap), or a 304 to a conditional request."""
    status = response.status
    if 200 <= status < 300:
        length = response.headers.get("Content-Length")
        if length and length.isdigit() and int(length) > limits.max_bytes:
            response_finish(response, reuse=False, interrupt=interrupt)
            raise too_large(limits.max_bytes)
        return True
    return status == 304 and request.conditional


def _follow(response: urllib3.BaseHTTPResponse, *, chain: _Chain, interrupt: FetchInterrupt | None) -> None:
    """Move ``chain`` on to the redirect's target; raises for an answer that is neither final nor a
    redirect to follow."""
    status = response.status
    location = response.headers.get("Location")
    response_finish(response, reuse=False, interrupt=interrupt)
    if status not in REDIRECT_STATUSES:
        if 300 <= status < 400 or status < 200:
            raise FetchError(
                "invalid_response", f"target answered {status}, which is not followed", permanent=True
            )
        raise answered_by(
            status_error(status, response.reason or "", response.headers.get("Retry-After")), chain.url
        )
    if not location:
        raise FetchError("invalid_response", f"redirect {status} without Location", permanent=True)
    next_url = urljoin(chain.url, location.strip()).split("#", 1)[0]
    if _origin(next_url) != _origin(chain.url):
        chain.headers = {k: v for k, v in chain.headers.items() if k.lower() not in _ORIGIN_BOUND_HEADERS}
        chain.cross_origin = True
    if status == 303 and chain.method != "HEAD" or status in (301, 302) and chain.method == "POST":
        chain.method, chain.body, chain.to_get = "GET", None, True
        chain.headers = {k: v for k, v in chain.headers.items() if k.lower() != "content-type"}
    chain.url = next_url


def _robots_fetch(
    *, origin: str, limits: FetchLimits, check: Callable[[], None], deadline: float
) -> RobotsAnswer:
    """``/robots.txt`` of ``origin`` through this same guarded fetcher (address guard, timeouts,
    at most 5 redirects as RFC 9309 asks), read up to ``MAX_ROBOTS_BYTES``. A failure with a
    status is that status; a permanent one without (too many redirects, a refused address, a
    malformed answer) counts as "unavailable", which the RFC treats as a 4xx; a temporary one
    (timeout, connection) as unreachable."""
    request = FetchRequest(
        method="GET",
        url=f"{origin}/robots.txt",
        timeout_s=max(0.001, min(ROBOTS_FETCH_TIMEOUT_S, deadline - time.monotonic())),
    )
    robots_limits = FetchLimits(
        connect_timeout_s=limits.connect_timeout_s,
        max_bytes=limits.max_bytes,
        max_redirects=min(limits.max_redirects, 5),
        user_agent=limits.user_agent,
    )
    try:
        with fetch_open(request=request, limits=robots_limits, check=check) as fetched:
            body = bytearray()
            for chunk in fetched.chunks():
                body += chunk
                if len(body) >= MAX_ROBOTS_BYTES:
                    break
            return RobotsAnswer(
                status=fetched.status, text=bytes(body[:MAX_ROBOTS_BYTES]).decode("utf-8", "replace")
            )
    except FetchError as e:
        if e.http_status is not None:
            return RobotsAnswer(status=e.http_status)
        return RobotsAnswer(status=404 if e.permanent else None)


def egress_proxy_for(host: str) -> EgressProxy | None:
    """The proxy a request to ``host`` leaves through (FR-28, docs/egress.md): its domain policy's,
    "none" for a direct one, else SCRAPEJOBS_EGRESS_PROXY. Both are checked when set."""
    configured = domain_limits_get(domain=host).egress_proxy
    if configured == EGRESS_DIRECT:
        return None
    return egress_proxy_parse(configured if configured is not None else settings.SCRAPEJOBS_EGRESS_PROXY)


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def _check_scheme(url: str) -> None:
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as e:
        raise FetchError("invalid_url", f"unusable URL: {e}", permanent=True) from e
    if scheme not in ("http", "https"):
        raise FetchError(
            "invalid_response", f"refusing to follow a {scheme or 'schemeless'} URL", permanent=True
        )


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port
