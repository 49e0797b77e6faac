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
  and the job's next attempt goes on from that hop (``_Resume``). The first hop's permit is the worker's gate. With ``obey_robots`` every hop's URL is checked against its host's robots.txt
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
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

import redis
import urllib3
from django.conf import settings

from apps.admin_mixins import headers_masked
from apps.outbound.connections import pool_manager
from apps.outbound.interrupt import FetchInterrupt, RequestContext, request_context
from apps.outbound.proxies import EgressProxy, egress_proxy_parse
from apps.politeness.limiter import DEFAULT_SHARE, LineShare, domain_permit_acquire, domain_permit_release
from apps.politeness.models import EGRESS_DIRECT
from apps.politeness.robots import (
    MAX_ROBOTS_BYTES,
    ROBOTS_FETCH_TIMEOUT_S,
    RobotsAnswer,
    RobotsUnavailable,
    robots_rules_get,
)
from apps.politeness.selectors import domain_limits_get
from apps.redis_clients import state_redis
from apps.scraping.errors import FetchError, classify, status_error

logger = logging.getLogger(__name__)

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# A redirect hop with no turn is a deferral, never a wait in the thread (NFR-5, NFR-24). A hop
# within the group its fetch already holds is kept (``_Resume``) this long past its wait, so that
# the job's next attempt goes on from it instead of walking the chain from its first URL again
# (which, at a burst of 1, would never get a chain of two requests through).
HOP_RESUME_GRACE_S = 300.0
CHUNK_SIZE = 64 * 1024
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
    # be kept to go on from (_Resume).
    resumable: bool = False
    share: LineShare = DEFAULT_SHARE  # and where it stands there (NFR-9, NFR-10)
    # A conditional request (FR-33, docs/revalidation.md): a 304 Not Modified is then an answer,
    # yielded like a 2xx (with no body), not an invalid response.
    conditional: bool = False


@dataclass(frozen=True)
class FetchLimits:
    connect_timeout_s: float
    max_bytes: int
    max_redirects: int
    user_agent: str
    chunk_size: int = CHUNK_SIZE

    @classmethod
    def from_settings(cls) -> FetchLimits:
        return cls(
            connect_timeout_s=settings.SCRAPEJOBS_FETCH_CONNECT_TIMEOUT_S,
            max_bytes=settings.SCRAPEJOBS_FETCH_MAX_BYTES,
            max_redirects=settings.SCRAPEJOBS_FETCH_MAX_REDIRECTS,
            user_agent=settings.SCRAPEJOBS_FETCH_USER_AGENT,
        )


# The target's response headers kept with a result (FR-25): bounded, because a hostile target
# may send thousands, and masked, because Set-Cookie and the like are credentials.
MAX_KEPT_HEADERS = 64
MAX_KEPT_HEADER_VALUE = 1024
MAX_KEPT_HEADERS_BYTES = 16 * 1024


def response_headers_kept(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The response headers as stored with the result: at most MAX_KEPT_HEADERS names (repeated
    ones joined with ", "), values cut at MAX_KEPT_HEADER_VALUE, MAX_KEPT_HEADERS_BYTES in all,
    credential-like ones masked as everywhere else (apps.admin_mixins.headers_masked)."""
    kept: dict[str, str] = {}
    size = 0
    for name, value in items:
        name = name.lower()[:256]
        if name not in kept and len(kept) >= MAX_KEPT_HEADERS:
            continue
        joined = value if name not in kept else f"{kept[name]}, {value}"
        joined = joined[:MAX_KEPT_HEADER_VALUE]
        grow = len(name) + len(joined) - (len(name) + len(kept[name]) if name in kept else 0)
        if size + grow > MAX_KEPT_HEADERS_BYTES:
            continue
        size += grow
        kept[name] = joined
    return headers_masked(kept)


class Fetched:
    """A 2xx answer whose body is still to be read, through ``chunks()``."""

    def __init__(
        self,
        *,
        response: urllib3.BaseHTTPResponse,
        url: str,
        deadline: float,
        limits: FetchLimits,
        check: Callable[[], None],
        interrupt: FetchInterrupt | None = None,
    ):
        self._response = response
        self._deadline = deadline
        self._limits = limits
        self._check = check
        self._interrupt = interrupt
        self.url = url
        self.status = response.status
        # As the target sent them, for a rendered page's subresources (apps/scraping/render.py);
        # ``headers`` is what is stored with the result (bounded, credentials masked, FR-25).
        self.raw_headers = response.headers
        self.content_type: str | None = (response.headers.get("Content-Type") or "")[:255] or None
        self.headers = response_headers_kept(response.headers.items())
        self.complete = False

    def chunks(self) -> Iterator[bytes]:
        """The body, chunk by chunk. Calls ``check`` before every read (it may raise to stop),
        and raises ``FetchError`` on the deadline, the size limit, or a broken connection."""
        total = 0
        while True:
            self._check()
            self._set_read_timeout(_remaining(self._deadline))
            try:
                chunk = self._response.read1(self._limits.chunk_size)
            except Exception as e:  # noqa: BLE001 - classified, never swallowed
                raise _answered_by(_failure(e, interrupt=self._interrupt, check=self._check), self.url) from e
            if not chunk and self._interrupt is not None and self._interrupt.fired:
                # A shut-down socket reads as a clean end of stream: not a complete body.
                raise _failure(None, interrupt=self._interrupt, check=self._check)
            if not chunk:
                break
            total += len(chunk)
            if total > self._limits.max_bytes:
                raise _too_large(self._limits.max_bytes)
            yield chunk
        self.complete = True

    def _set_read_timeout(self, seconds: float) -> None:
        # The socket timeout bounds each read; setting it to the time left makes the overall
        # deadline hold even when a target sends one byte just before every read timeout.
        conn = getattr(self._response, "connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            sock.settimeout(max(seconds, 0.001))


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
        _RedirectCharges(
            first_url=request.url,
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
                _finish(response, reuse=fetched.complete, interrupt=interrupt)
    finally:
        if charges is not None:
            charges.release()


def _no_check() -> None:
    return None


def _open_final(
    *,
    request: FetchRequest,
    limits: FetchLimits,
    check: Callable[[], None],
    ctx: RequestContext,
    charges: _RedirectCharges | None,
) -> tuple[urllib3.BaseHTTPResponse, str]:
    deadline, interrupt = ctx.deadline, ctx.interrupt
    method = request.method.upper()
    url = request.url
    body: bytes | None = request.body.encode() if request.body is not None and method == "POST" else None
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED_HEADERS}
    if not any(k.lower() == "user-agent" for k in headers):
        headers["User-Agent"] = limits.user_agent
    first = 0
    resumed = (
        _resume_take(ticket=request.ticket)
        if charges is not None and request.ticket and request.resumable
        else None
    )
    if resumed is not None and resumed.url_from == url:
        # The previous attempt's chain stopped at this hop for want of its group's token: the
        # worker's gate has just taken this attempt's token of that group, for this hop.
        first, url = resumed.hop, resumed.url
        if resumed.to_get:
            method, body = "GET", None
            headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        if resumed.cross_origin:
            headers = {k: v for k, v in headers.items() if k.lower() not in _ORIGIN_BOUND_HEADERS}
    to_get = cross_origin = False
    for hop in range(first, limits.max_redirects + 1):
        check()
        _check_scheme(url)
        if hop > first and charges is not None:
            try:
                charges.charge(url=url)
            except RedirectDeferred as deferred:
                if deferred.same_group and request.ticket:
                    _resume_keep(
                        ticket=request.ticket,
                        resume=_Resume(
                            url_from=request.url,
                            url=url,
                            hop=hop,
                            to_get=to_get or (resumed is not None and resumed.to_get),
                            cross_origin=cross_origin or (resumed is not None and resumed.cross_origin),
                        ),
                        ttl_s=deferred.wait_s + HOP_RESUME_GRACE_S,
                    )
                raise
        if request.obey_robots:
            _robots_check(url, limits=limits, check=check, deadline=deadline)
        remaining = _remaining(deadline)
        timeout = urllib3.Timeout(connect=min(limits.connect_timeout_s, remaining), read=remaining)
        try:
            response = pool_manager(proxy=egress_proxy_for(_host(url))).request(
                method,
                url,
                body=body,
                headers=headers,
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
            raise _answered_by(_failure(e, interrupt=interrupt, check=check), url) from e
        status = response.status
        if 200 <= status < 300:
            length = response.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > limits.max_bytes:
                _finish(response, reuse=False, interrupt=interrupt)
                raise _too_large(limits.max_bytes)
            return response, url
        if status == 304 and request.conditional:
            return response, url
        location = response.headers.get("Location")
        _finish(response, reuse=False, interrupt=interrupt)
        if status not in REDIRECT_STATUSES:
            if 300 <= status < 400 or status < 200:
                raise FetchError(
                    "invalid_response", f"target answered {status}, which is not followed", permanent=True
                )
            raise _answered_by(
                status_error(status, response.reason or "", response.headers.get("Retry-After")), url
            )
        if not location:
            raise FetchError("invalid_response", f"redirect {status} without Location", permanent=True)
        next_url = urljoin(url, location.strip()).split("#", 1)[0]
        if _origin(next_url) != _origin(url):
            headers = {k: v for k, v in headers.items() if k.lower() not in _ORIGIN_BOUND_HEADERS}
            cross_origin = True
        if status == 303 and method != "HEAD" or status in (301, 302) and method == "POST":
            method, body, to_get = "GET", None, True
            headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        url = next_url
    raise FetchError("too_many_redirects", f"more than {limits.max_redirects} redirects", permanent=True)


class RedirectDeferred(Exception):
    """A redirect hop's domain has no turn for this fetch now (NFR-24): the attempt ends as a
    deferral, and the job starts again after ``wait_s``, when its place in that domain's line
    comes: from its own URL, or, when the hop's group was the one the fetch held
    (``same_group``), from that hop. Waiting for it here would hold the worker thread (NFR-5:
    waiting for a domain holds no worker slot)."""

    def __init__(self, *, host: str, wait_s: float, reason: str, same_group: bool = False):
        super().__init__(f"redirected to {host}, which has no turn for it for {wait_s:.2f}s ({reason})")
        self.host, self.wait_s, self.reason, self.same_group = host, wait_s, reason, same_group


@dataclass(frozen=True)
class _Resume:
    """Where a job's redirect chain stopped for want of a token of the group it already held:
    its next attempt (from ``url_from``, the job's URL) goes on at ``url`` as hop ``hop``, with
    what the hops before it changed (a switch to GET, origin-bound headers dropped)."""

    url_from: str
    url: str
    hop: int
    to_get: bool
    cross_origin: bool


def _resume_key(ticket: str) -> str:
    return f"sj:hop-resume:{ticket}"


def _resume_keep(*, ticket: str, resume: _Resume, ttl_s: float) -> None:
    try:
        state_redis().set(
            _resume_key(ticket),
            json.dumps(dataclasses.asdict(resume)),
            px=max(1, int(ttl_s * 1000)),
        )
    except redis.RedisError:
        # The next attempt then starts from the job's own URL, as a deferral always did.
        logger.warning("keeping a deferred redirect hop failed", exc_info=True)


def _resume_take(*, ticket: str) -> _Resume | None:
    try:
        raw = state_redis().getdel(_resume_key(ticket))
    except redis.RedisError:
        logger.warning("reading a deferred redirect hop failed", exc_info=True)
        return None
    if raw is None:
        return None
    return _Resume(**json.loads(raw))


class _RedirectCharges:
    """The permits a fetch's redirect hops take: each hop is charged to the domain it goes to.
    The first URL's domain group is held by the worker's gate; a hop within a group already held
    takes a token only, a hop to another group a token and a slot, released when the fetch ends
    (or expiring by themselves if the worker dies). A hop refused raises ``RedirectDeferred``
    with its place kept in that domain's line under ``ticket`` (the job's, so that the job's
    next attempt, coming back at that time, takes its turn there where it stood)."""

    def __init__(self, *, first_url: str, ticket: str, slot_ttl_s: float, share: LineShare = DEFAULT_SHARE):
        self.holder = f"hop:{secrets.token_hex(8)}"
        self.ticket = f"hop:{ticket}" if ticket else self.holder
        # A hop within the group the fetch holds keeps the job's own place in that group's line:
        # the job's next attempt, going on from that hop (_Resume), asks the worker's gate there.
        self.own_ticket = ticket or self.holder
        self.share = share
        self.slot_ttl_s = slot_ttl_s
        self.held = {domain_limits_get(domain=_host(first_url)).group}
        self.taken: list[str] = []

    def charge(self, *, url: str) -> None:
        host = _host(url)
        group = domain_limits_get(domain=host).group
        token_only = group in self.held
        # No wait in the thread for any hop (NFR-5): one refused is a deferral; one within the
        # group the fetch holds is kept for the job's next attempt to go on from (_Resume).
        try:
            decision = domain_permit_acquire(
                domain=host,
                holder=self.holder,
                ticket=self.own_ticket if token_only else self.ticket,
                slot_ttl_s=self.slot_ttl_s,
                token_only=token_only,
                share=self.share,
            )
        except redis.RedisError:
            # The gate already failed closed for the job's own domain; a hop is not worth
            # failing a fetch in flight for.
            logger.warning("politeness state unavailable for a redirect to %s", host, exc_info=True)
            return
        if not decision.granted:
            raise RedirectDeferred(
                host=host, wait_s=decision.wait_s, reason=decision.reason, same_group=token_only
            )
        if not token_only:
            self.held.add(group)
            self.taken.append(group)

    def release(self) -> None:
        for group in self.taken:
            try:
                domain_permit_release(domain=group, holder=self.holder)
            except redis.RedisError:
                logger.warning("releasing a redirect slot of %s failed; it expires by itself", group)


def _robots_check(url: str, *, limits: FetchLimits, check: Callable[[], None], deadline: float) -> None:
    """Raise ``robots_disallowed`` when ``url``'s robots.txt forbids it (and its policy obeys
    robots.txt), ``robots_unavailable`` while that file cannot be had."""
    parts = urlsplit(url)
    host = _host(url)
    if not domain_limits_get(domain=host).obey_robots:
        return
    origin = _robots_origin(parts.scheme.lower(), host, parts.port)
    try:
        rules = robots_rules_get(
            origin=origin,
            host=host,
            fetch=lambda: _robots_fetch(origin=origin, limits=limits, check=check, deadline=deadline),
            wait_s=min(ROBOTS_FETCH_TIMEOUT_S, _remaining(deadline)),
        )
    except RobotsUnavailable as e:
        raise FetchError("robots_unavailable", str(e), permanent=False, retry_after_s=e.retry_after_s) from e
    except redis.RedisError as e:
        raise FetchError("robots_unavailable", f"robots.txt cache unavailable: {e}", permanent=False) from e
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if not rules.allows(target):
        raise FetchError("robots_disallowed", f"robots.txt of {origin} disallows {target}", permanent=True)


def _robots_origin(scheme: str, host: str, port: int | None) -> str:
    """``scheme://host:port``, the origin a robots.txt is about (RFC 9309 2.3): its verdict, its
    cached copy and any pause it causes hold for this origin only, never for the host's other
    ports or schemes. An IPv6 literal is bracketed (RFC 3986 3.2.2): unbracketed, the file's URL
    could not be parsed, which read as "no robots.txt", allow everything."""
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or (443 if scheme == 'https' else 80)}"


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


def _finish(response: urllib3.BaseHTTPResponse, *, reuse: bool, interrupt: FetchInterrupt | None) -> None:
    """Give the connection back to its pool; closed first unless the body was read to its end,
    since a half-read connection cannot carry the next request. The interrupt lets go of it
    first: once pooled it may serve another fetch."""
    if interrupt is not None:
        interrupt.forget()
    if not reuse:
        response.close()
    response.release_conn()


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


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError("timeout", "the fetch did not finish within the job's timeout", permanent=False)
    return left


def _too_large(limit: int) -> FetchError:
    return FetchError("body_too_large", f"body larger than {limit} bytes", permanent=True)


def _answered_by(error: FetchError, url: str) -> FetchError:
    error.url = url
    return error


def _failure(
    e: BaseException | None, *, interrupt: FetchInterrupt | None, check: Callable[[], None]
) -> FetchError:
    """The FetchError for ``e``, unless the fetch was interrupted: then whatever broke was our
    own doing, and ``check`` says why by raising (a cancel, a lost lease)."""
    if interrupt is not None and interrupt.fired:
        check()
        return FetchError("interrupted", "the fetch was stopped from outside", permanent=False)
    if e is None:
        return FetchError("connection_error", "the connection ended early", permanent=False)
    return classify(e)
