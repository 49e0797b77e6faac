"""The answer being read, within the fetch's limits (apps/scraping/fetch.py sends the request):
the limits themselves, the body streamed chunk by chunk under the fetch's deadline and size cap
(``Fetched``), the response headers kept with a result (FR-25), and how a failure of the request
or the read becomes a ``FetchError`` (NFR-3).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import urllib3
from django.conf import settings

from apps.admin_mixins import headers_masked
from apps.outbound.interrupt import FetchInterrupt
from apps.scraping.errors import FetchError, classify

CHUNK_SIZE = 64 * 1024


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
            self._set_read_timeout(time_left(self._deadline))
            try:
                chunk = self._response.read1(self._limits.chunk_size)
            except Exception as e:  # noqa: BLE001 - classified, never swallowed
                raise answered_by(
                    fetch_failure(e, interrupt=self._interrupt, check=self._check), self.url
                ) from e
            if not chunk and self._interrupt is not None and self._interrupt.fired:
                # A shut-down socket reads as a clean end of stream: not a complete body.
                raise fetch_failure(None, interrupt=self._interrupt, check=self._check)
            if not chunk:
                break
            total += len(chunk)
            if total > self._limits.max_bytes:
                raise too_large(self._limits.max_bytes)
            yield chunk
        self.complete = True

    def _set_read_timeout(self, seconds: float) -> None:
        # The socket timeout bounds each read; setting it to the time left makes the overall
        # deadline hold even when a target sends one byte just before every read timeout.
        conn = getattr(self._response, "connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            sock.settimeout(max(seconds, 0.001))


def response_finish(
    response: urllib3.BaseHTTPResponse, *, reuse: bool, interrupt: FetchInterrupt | None
) -> None:
    """Give the connection back to its pool; closed first unless the body was read to its end,
    since a half-read connection cannot carry the next request. The interrupt lets go of it
    first: once pooled it may serve another fetch."""
    if interrupt is not None:
        interrupt.forget()
    if not reuse:
        response.close()
    response.release_conn()


def time_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError("timeout", "the fetch did not finish within the job's timeout", permanent=False)
    return left


def too_large(limit: int) -> FetchError:
    return FetchError("body_too_large", f"body larger than {limit} bytes", permanent=True)


def answered_by(error: FetchError, url: str) -> FetchError:
    error.url = url
    return error


def fetch_failure(
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
