"""A rendered attempt (FR-30..FR-32, NFR-32; docs/design/browser.md): the document, fetched as a
plain fetch would fetch it, then loaded in Chromium with every request of the page answered by
the same guarded fetcher, then the HTML (and a screenshot) stored.

1. **The document** is fetched by ``fetch_open`` in the worker's thread: the address guard on the
   connected address, robots.txt (for the document), every redirect hop judged by the guard and
   charged to its domain, the job's headers, ``timeout_s``, the size limit. Its status is the
   attempt's (a 404 fails the job exactly as a plain fetch does); its domain's permit is the
   one the worker's gate took before the claim.
2. **The page** is rendered by the process's Chromium (``apps.scraping.browser``), which is given
   the document as the answer to its navigation and never touches the network itself. Every
   other request the page makes (scripts, styles, XHR and fetch, frames) comes to
   ``PageRequests``, which decides it on a fetch thread:

   - over ``MAX_SUBREQUESTS``, a method other than GET, HEAD or POST, a scheme other than http(s),
     or a resource type the job blocks (``browser.block``): blocked;
   - every host takes one token of its own domain's bucket now (``domain_token_try``: the
     page's domain for its own assets, a CDN's or another site's for theirs) or is blocked: a
     page's assets never wait and book no place in any domain's line (NFR-32);
   - then it is fetched by ``fetch_open`` (guarded connect, every redirect hop guarded, at most
     ``SUBRESOURCE_MAX_BYTES``, at most ``SUBRESOURCE_TIMEOUT_S``), and the page gets its answer;
     an address the guard refuses (on the first hop or after a redirect) is blocked;
   - websockets are blocked by the browser module.

   The attempt records how many requests the page made and how many were blocked.
3. **The result** is the HTML after the scripts ran (``page.content()``), UTF-8, at most
   ``SCRAPEJOBS_FETCH_MAX_BYTES``, stored with its SHA-256 as ``text/html; charset=utf-8``; a
   screenshot is stored first, beside it (``screenshot_key``), so a body is never recorded
   without the screenshot it was asked with.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis

from apps.jobs.claims import ClaimedJob
from apps.jobs.receipts import ResultStored
from apps.outbound.interrupt import FetchInterrupt
from apps.politeness.limiter import domain_token_try
from apps.results.storage import result_key, result_store, screenshot_key
from apps.scraping.browser import browser_pool
from apps.scraping.browser_page import Rendered, RenderSpec, SubAnswer
from apps.scraping.errors import FetchError
from apps.scraping.fetch import FetchRequest, fetch_open
from apps.scraping.fetched import Fetched, FetchLimits

logger = logging.getLogger(__name__)

# What one page may ask for: requests besides its document, bytes per answer, bytes in all,
# seconds per request (docs/limits.md). It was 500 requests of up to 10 MiB: 5 GiB for one page.
MAX_SUBREQUESTS = 200
SUBRESOURCE_MAX_BYTES = 10 * 1024 * 1024
PAGE_MAX_BYTES = 32 * 1024 * 1024
SUBRESOURCE_TIMEOUT_S = 30.0
HTML_CONTENT_TYPE = "text/html; charset=utf-8"
# browser.block's names -> Playwright's resource types.
_BLOCKABLE_TYPES = {"images": "image", "media": "media", "fonts": "font"}
_METHODS = frozenset({"GET", "HEAD", "POST"})
# Answer headers passed on to the page; the body is already decoded (no Content-Encoding), and
# cookies stay out of a job's page (each job's browser context starts empty anyway).
_PASSED_HEADERS = frozenset(
    {
        "content-type",
        "content-language",
        "cache-control",
        "last-modified",
        "etag",
        "access-control-allow-origin",
        "access-control-allow-credentials",
        "access-control-allow-headers",
        "access-control-allow-methods",
        "access-control-expose-headers",
        "timing-allow-origin",
    }
)
# Headers Chromium sets that are the fetcher's to set (framing, connection, the origin's cookies).
_DROPPED_REQUEST_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "cookie"})


@dataclass(frozen=True)
class RenderedAttempt:
    stored: ResultStored
    answered_url: str
    subrequests_made: int
    subrequests_blocked: int


@dataclass(frozen=True)
class Document:
    url: str
    status: int
    content_type: str | None
    body: bytes


def _declared_length(headers: Mapping[str, str]) -> int | None:
    """A body's length as the target declared it, when what is read is that body (no
    Content-Encoding that decoding would change); None otherwise."""
    encoding = (headers.get("Content-Encoding") or "identity").strip().lower()
    length = (headers.get("Content-Length") or "").strip()
    if encoding != "identity" or not length.isdigit():
        return None
    return int(length)


class PageRequests:
    """Every request of one page (``browser_page.Answer``): the document from what the worker fetched,
    the rest as the module docstring says. Called from several fetch threads at once."""

    def __init__(self, *, document: Document, options: dict, deadline: float, limits: FetchLimits):
        self.document = document
        self.blocked_types = {
            _BLOCKABLE_TYPES[name] for name in options.get("block") or () if name in _BLOCKABLE_TYPES
        }
        self.deadline = deadline
        self.limits = limits
        self.asked = 0
        # Bytes of answers the page may still take (docs/limits.md). An answer takes its share
        # as it is known: a plain body's declared length whole before its first byte is read
        # (so answers read at once cannot each read part of what is left and all fail), a body
        # of unknown length chunk by chunk as it is read. Whatever an answer that is not passed
        # to the page took is given back. The page's fetch threads together never hold more than
        # PAGE_MAX_BYTES, and an answer is never refused for what others might read but have not.
        self.bytes_left = PAGE_MAX_BYTES
        self._budget_lock = threading.Lock()

    def _take(self, wanted: int) -> bool:
        with self._budget_lock:
            if wanted > self.bytes_left:
                return False
            self.bytes_left -= wanted
            return True

    def _give_back(self, unused: int) -> None:
        with self._budget_lock:
            self.bytes_left += unused

    def _read(self, fetched: Fetched) -> tuple[bytes | None, int]:
        """The body of ``fetched`` within the page's budget, and the bytes it holds of it (given
        back by the caller for what it does not pass on); None when the budget ran out."""
        held = 0
        declared = _declared_length(fetched.raw_headers)
        if declared is not None:
            if declared > self.limits.max_bytes or not self._take(declared):
                return None, 0
            held = declared
        parts: list[bytes] = []
        got = 0
        try:
            for chunk in fetched.chunks():
                got += len(chunk)
                if got > held:
                    if not self._take(got - held):
                        return None, held
                    held = got
                parts.append(chunk)
        except BaseException:
            self._give_back(held)
            raise
        return b"".join(parts), held

    def __call__(
        self,
        url: str,
        method: str,
        headers: dict[str, str],
        body: bytes | None,
        resource_type: str,
        is_document: bool,
    ) -> SubAnswer:
        if is_document:
            return SubAnswer(
                "fulfill",
                status=self.document.status,
                headers={"content-type": self.document.content_type or "text/html"},
                body=self.document.body,
            )
        refused = self._refusal(url, method=method, resource_type=resource_type)
        if refused is not None:
            return refused
        return self._fetched(url, method=method, headers=headers, body=body)

    def _refusal(self, url: str, *, method: str, resource_type: str) -> SubAnswer | None:
        """Why the page's request is blocked before any fetch; None when it may be fetched."""
        self.asked += 1  # an approximate count across threads is enough for a cap
        if self.asked > MAX_SUBREQUESTS:
            return SubAnswer("block", reason="too many requests")
        if resource_type in self.blocked_types:
            return SubAnswer("block", reason=f"{resource_type} blocked by the job")
        if method.upper() not in _METHODS:
            return SubAnswer("block", reason=f"method {method}")
        host = _host(url)
        if urlsplit(url).scheme.lower() not in ("http", "https") or not host:
            return SubAnswer("block", reason="not an http(s) URL")
        try:
            if not domain_token_try(domain=host):
                return SubAnswer("block", reason=f"no token of {host} now")
        except redis.RedisError:
            return SubAnswer("block", reason="politeness state unavailable")
        return None

    def _fetched(self, url: str, *, method: str, headers: dict[str, str], body: bytes | None) -> SubAnswer:
        """The page's request fetched through the guarded fetcher, its answer within the page's
        budget of time and bytes."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return SubAnswer("fail", reason="the job's timeout passed")
        request = FetchRequest(
            method=method.upper(),
            url=url,
            headers={k: v for k, v in headers.items() if k.lower() not in _DROPPED_REQUEST_HEADERS},
            body=body.decode("utf-8", "replace") if body else None,
            timeout_s=min(SUBRESOURCE_TIMEOUT_S, left),
        )
        spent = f"the page's {PAGE_MAX_BYTES >> 20} MiB of answers are spent"
        if self.bytes_left <= 0:
            return SubAnswer("block", reason=spent)
        try:
            with fetch_open(request=request, limits=self.limits) as fetched:
                data, held = self._read(fetched)
                if data is None:
                    self._give_back(held)
                    return SubAnswer("block", reason=spent)
                self._give_back(held - len(data))
                passed = {
                    k.lower(): v for k, v in fetched.raw_headers.items() if k.lower() in _PASSED_HEADERS
                }
                return SubAnswer("fulfill", status=fetched.status, headers=passed, body=data)
        except FetchError as e:
            if e.error_class == "address_refused":
                logger.info("page request to %s blocked: %s", url, e.message)
                return SubAnswer("block", reason=e.message)
            if e.http_status is not None:
                return SubAnswer("fulfill", status=e.http_status)
            return SubAnswer("fail", reason=e.message)


def render_and_store(
    *,
    claimed: ClaimedJob,
    request: FetchRequest,
    check: Callable[[], None],
    interrupt: FetchInterrupt | None,
    store_deadline: float,
) -> RenderedAttempt:
    """One rendered attempt of ``claimed`` (see the module docstring). Raises ``FetchError``,
    what ``check`` raises, or ``ResultStoreFailed``, as the plain fetch does."""
    deadline = time.monotonic() + claimed.timeout_s  # timeout_s bounds the whole render
    limits = FetchLimits.from_settings()
    document = _document_fetch(request=request, limits=limits, check=check, interrupt=interrupt)
    options = claimed.browser_options or {}
    user_agent = next((v for k, v in claimed.headers.items() if k.lower() == "user-agent"), limits.user_agent)
    page_limits = FetchLimits(
        connect_timeout_s=limits.connect_timeout_s,
        max_bytes=min(limits.max_bytes, SUBRESOURCE_MAX_BYTES),
        max_redirects=limits.max_redirects,
        user_agent=user_agent,
    )
    answers = PageRequests(document=document, options=options, deadline=deadline, limits=page_limits)
    spec = RenderSpec(
        url=document.url, options=options, user_agent=user_agent, deadline=deadline, answer=answers
    )
    rendered = browser_pool().render(spec, check=check)
    html = rendered.html.encode("utf-8")
    if len(html) > limits.max_bytes:
        raise FetchError(
            "body_too_large", f"rendered page larger than {limits.max_bytes} bytes", permanent=True
        )
    check()
    return _rendered_store(
        claimed=claimed, rendered=rendered, html=html, document=document, store_deadline=store_deadline
    )


def _document_fetch(
    *, request: FetchRequest, limits: FetchLimits, check: Callable[[], None], interrupt: FetchInterrupt | None
) -> Document:
    """The page's document, fetched as a plain job's body is (redirects, politeness, robots.txt)."""
    with fetch_open(request=request, limits=limits, check=check, interrupt=interrupt) as fetched:
        return Document(
            url=fetched.url,
            status=fetched.status,
            content_type=fetched.content_type,
            body=b"".join(fetched.chunks()),
        )


def _rendered_store(
    *, claimed: ClaimedJob, rendered: Rendered, html: bytes, document: Document, store_deadline: float
) -> RenderedAttempt:
    """Store the screenshot (when taken) and the rendered HTML, the job's result."""
    if rendered.screenshot is not None:
        body_key = result_key(job_id=claimed.id, attempt=claimed.attempt)
        result_store(
            job_id=claimed.id,
            attempt=claimed.attempt,
            chunks=[rendered.screenshot],
            content_type="image/png",
            http_status=document.status,
            deadline=store_deadline,
            key=screenshot_key(body_key),
        )
    stored = result_store(
        job_id=claimed.id,
        attempt=claimed.attempt,
        chunks=[html],
        content_type=HTML_CONTENT_TYPE,
        http_status=document.status,
        deadline=store_deadline,
    )
    return RenderedAttempt(
        stored=stored,
        answered_url=document.url,
        subrequests_made=rendered.made,
        subrequests_blocked=rendered.blocked,
    )


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""
