"""The fetcher: one HTTP request to an untrusted target, with every limit a worker needs.

urllib3 directly (no requests), so that the connection itself can be guarded:

- **Address guard**: ``_GuardedHTTPConnection._new_conn`` resolves the host itself, checks each
  candidate address (``apps.scraping.addresses``), connects to an allowed one and checks the
  socket's peer before a byte is sent. The check is on the address actually connected to, so a
  DNS answer that changes between a check and the connect cannot get through. HTTPS keeps SNI
  and certificate verification against the host name. Every redirect hop is a new request and
  goes through the same guard.
- **Timeouts**: connect = min(``SCRAPEJOBS_FETCH_CONNECT_TIMEOUT_S``, the job's ``timeout_s``),
  and it covers the name's resolution too (``getaddrinfo`` has no timeout of its own: see
  ``addresses.resolve_allowed(timeout_s=...)``); read = the time left; and one overall deadline of
  ``timeout_s`` for the whole fetch (redirects, headers and body), so a target that drips one
  byte at a time cannot hold a worker longer.
- **Stopping from outside**: ``check`` is called between hops and chunks, but a fetch can sit for
  minutes inside one read (waiting for headers, or for the next byte). ``FetchInterrupt.fire()``,
  from another thread, shuts the socket of the fetch's current connection down, so that read
  ends at once; the fetch then calls ``check`` again, which is expected to raise the reason
  (a cancel, a lost lease).
- **Redirects**: 301/302/303/307/308 are followed here, at most ``SCRAPEJOBS_FETCH_MAX_REDIRECTS``
  hops; 303 (and 301/302 after a POST) become GET without a body, as browsers do; credentials
  (Authorization, Cookie) are dropped when the origin changes.
- **Size**: at most ``SCRAPEJOBS_FETCH_MAX_BYTES`` of (decoded) body, refused up front when the
  Content-Length says so, otherwise when the running count passes it. The body is streamed in
  chunks; it is never held whole in memory.

What counts as success: a 2xx answer whose body was read completely. Every other status is a
failure and its body is not stored: redirects are followed, so a 3xx that is left over (304,
300, a redirect without Location) is ``invalid_response``; 4xx/5xx are ``http_<status>``.

Failure classes (contract 3.5); ``permanent`` says whether another attempt could help:

=====================  =========  ============================================================
error_class            permanent  when
=====================  =========  ============================================================
timeout                no         connect, read, or the overall deadline passed
connection_error       no         refused, reset, closed early (incomplete body)
dns_error              no         the name does not resolve (often a transient DNS failure), or
                                  its resolution outlasted the connect timeout
interrupted            no         ``FetchInterrupt.fire()`` stopped it and ``check`` gave no reason
http_408, http_429     no         408 Request Timeout, 429 Too Many Requests (Retry-After kept)
http_5xx (exact code)  no         500-599 except 501 and 505 (Retry-After kept)
http_<other>           yes        400, 401, 403, 404, 410, 422, 501, 505 and every other status
tls_error              yes        handshake or certificate failure
too_many_redirects     yes        more hops than the limit
body_too_large         yes        body (or its Content-Length) over the limit
address_refused        yes        the target resolves only to refused addresses
invalid_response       yes        malformed answer, undecodable body, unusable 3xx, bad Location
invalid_url            yes        a URL urllib3 cannot use (intake validates first)
=====================  =========  ============================================================
"""

from __future__ import annotations

import email.utils
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import urllib3
from django.conf import settings
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
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
from urllib3.util.connection import _set_socket_options  # noqa: PLC2701 - what create_connection uses

from apps.scraping.addresses import (
    AddressRefused,
    is_allowed_address,
    private_targets_allowed,
    resolve_allowed,
)

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# The longest wait a target's Retry-After can impose on one retry.
RETRY_AFTER_CAP_S = 86400.0
CHUNK_SIZE = 64 * 1024
# Headers the fetcher sets itself; a job's own values would break the request framing.
_DROPPED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
# Sent to the first origin only, as browsers and urllib3 do.
_ORIGIN_BOUND_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})


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

    def __repr__(self) -> str:
        return f"FetchError({self.error_class!r}, {self.message!r}, permanent={self.permanent})"


@dataclass(frozen=True)
class FetchRequest:
    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    timeout_s: float = 30.0


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


# --- Stopping a fetch from another thread --------------------------------------------------


class _Interrupted(Exception):
    """Raised inside the fetch when its interrupt had fired before a connection was watched.
    Not an OSError, so urllib3 passes it through untouched (discarding the connection)."""


class FetchInterrupt:
    """A handle another thread uses to stop one fetch, even one blocked in a read.

    The fetch tells it which connection it is using (``_watch``) and forgets it before the
    connection goes back to the pool (``_forget``); ``fire()`` shuts down the sockets watched at
    that moment. Watching and firing hold one lock, so a socket is never shut down once the fetch
    has let go of it (it may already carry another job's request), and a fetch that starts using a
    connection after ``fire()`` stops at once instead of being missed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fired = False
        self._conn: HTTPConnection | None = None
        self._connecting: socket.socket | None = None

    @property
    def fired(self) -> bool:
        return self._fired

    def fire(self) -> None:
        with self._lock:
            self._fired = True
            # While connecting, the socket is not yet the connection's ``sock``.
            for sock in (self._connecting, getattr(self._conn, "sock", None)):
                if sock is not None:
                    _shutdown(sock)

    def _watch(self, *, conn: HTTPConnection, connecting: socket.socket | None = None) -> None:
        with self._lock:
            if self._fired:
                raise _Interrupted("the fetch was stopped from outside")
            self._conn = conn
            if connecting is not None:
                self._connecting = connecting

    def _forget(self) -> None:
        with self._lock:
            self._conn = self._connecting = None


def _shutdown(sock: socket.socket) -> None:
    # A blocked recv() returns at once (end of stream); a blocked connect() fails. Errors mean the
    # socket is already closed, or was handed over to TLS (the wrapper is the connection's sock).
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


@dataclass
class _FetchContext:
    interrupt: FetchInterrupt | None
    deadline: float


# What the connection classes need to know about the fetch on whose thread they run: urllib3
# gives no way to pass it through ``urlopen``, and a pooled connection serves many fetches.
_context = threading.local()


def _current() -> _FetchContext | None:
    return getattr(_context, "fetch", None)


# --- Guarded connections -------------------------------------------------------------------


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
        ctx = _current()
        if ctx is not None and ctx.interrupt is not None:
            ctx.interrupt._watch(conn=self)  # type: ignore[arg-type]
        return super().request(*args, **kwargs)  # type: ignore[misc]

    def _new_conn(self) -> socket.socket:
        host = self._dns_host  # type: ignore[attr-defined]
        ctx = _current()
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
                    ctx.interrupt._watch(conn=self, connecting=sock)  # type: ignore[arg-type]
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


def _time_left(connect_timeout: float | None, ctx: _FetchContext | None) -> float | None:
    """The connect timeout, shortened to what is left of the fetch's deadline (resolution and
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


def _pool_manager() -> urllib3.PoolManager:
    """One pool manager per process (keep-alive across jobs to the same origin), and one per
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


# --- The fetch -----------------------------------------------------------------------------


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
        self.content_type: str | None = (response.headers.get("Content-Type") or "")[:255] or None
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
                raise _failure(e, interrupt=self._interrupt, check=self._check) from e
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
    ctx = _FetchContext(interrupt=interrupt, deadline=deadline)
    previous = _current()
    _context.fetch = ctx
    try:
        response, url = _open_final(request=request, limits=limits, check=check, ctx=ctx)
        fetched = Fetched(
            response=response, url=url, deadline=deadline, limits=limits, check=check, interrupt=interrupt
        )
        try:
            yield fetched
        finally:
            _finish(response, reuse=fetched.complete, interrupt=interrupt)
    finally:
        _context.fetch = previous


def _no_check() -> None:
    return None


def _open_final(
    *, request: FetchRequest, limits: FetchLimits, check: Callable[[], None], ctx: _FetchContext
) -> tuple[urllib3.BaseHTTPResponse, str]:
    deadline, interrupt = ctx.deadline, ctx.interrupt
    method = request.method.upper()
    url = request.url
    body: bytes | None = request.body.encode() if request.body is not None and method == "POST" else None
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED_HEADERS}
    if not any(k.lower() == "user-agent" for k in headers):
        headers["User-Agent"] = limits.user_agent
    for _hop in range(limits.max_redirects + 1):
        check()
        _check_scheme(url)
        remaining = _remaining(deadline)
        timeout = urllib3.Timeout(connect=min(limits.connect_timeout_s, remaining), read=remaining)
        try:
            response = _pool_manager().request(
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
                interrupt._forget()
            raise _failure(e, interrupt=interrupt, check=check) from e
        status = response.status
        if 200 <= status < 300:
            length = response.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > limits.max_bytes:
                _finish(response, reuse=False, interrupt=interrupt)
                raise _too_large(limits.max_bytes)
            return response, url
        location = response.headers.get("Location")
        _finish(response, reuse=False, interrupt=interrupt)
        if status not in REDIRECT_STATUSES:
            if 300 <= status < 400 or status < 200:
                raise FetchError(
                    "invalid_response", f"target answered {status}, which is not followed", permanent=True
                )
            raise status_error(status, response.reason or "", response.headers.get("Retry-After"))
        if not location:
            raise FetchError("invalid_response", f"redirect {status} without Location", permanent=True)
        next_url = urljoin(url, location.strip()).split("#", 1)[0]
        if _origin(next_url) != _origin(url):
            headers = {k: v for k, v in headers.items() if k.lower() not in _ORIGIN_BOUND_HEADERS}
        if status == 303 and method != "HEAD" or status in (301, 302) and method == "POST":
            method, body = "GET", None
            headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        url = next_url
    raise FetchError("too_many_redirects", f"more than {limits.max_redirects} redirects", permanent=True)


def _finish(response: urllib3.BaseHTTPResponse, *, reuse: bool, interrupt: FetchInterrupt | None) -> None:
    """Give the connection back to its pool; closed first unless the body was read to its end,
    since a half-read connection cannot carry the next request. The interrupt lets go of it
    first: once pooled it may serve another fetch."""
    if interrupt is not None:
        interrupt._forget()
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
    return _classify(e)


def _classify(e: BaseException) -> FetchError:
    """The FetchError an exception out of urllib3 (or the guard) stands for."""
    if isinstance(e, FetchError):
        return e
    if isinstance(e, AddressRefused):
        return FetchError("address_refused", str(e), permanent=True)
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
