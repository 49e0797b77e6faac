"""The API's request-body bound, and Django's browser middleware, skipped for the API.

Sessions, CSRF, the logged-in user and flash messages serve the admin and the dashboard. The API
(``/api/``) authenticates every call by bearer token, is CSRF-exempt (DRF) and uses none of them,
yet each of them ran on every API request: building a message store and a session store alone
was about 5% of a submit's CPU. These subclasses run Django's code unchanged for every other path
(and are what the admin's system checks look for: subclasses of Django's classes).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from typing import Any, BinaryIO

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.middleware import clickjacking, common, security
from django.middleware.csrf import CsrfViewMiddleware
from whitenoise.middleware import WhiteNoiseMiddleware

from apps.api.errors import ApiError, api_error_response, body_unreadable, length_required, payload_too_large
from apps.api.paths import API_PATH_PREFIX, API_V1_BASE

logger = logging.getLogger(__name__)

# POST /batches takes files: its bound is SCRAPEJOBS_BATCH_MAX_BYTES (apps/batches).
BATCHES_PATH = f"{API_V1_BASE}/batches"


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PATH_PREFIX)


class RequestBodyLimitMiddleware:
    """Under WSGI (scrapejobs/wsgi.py, and Django's test client): every request body under /api/
    is at most SCRAPEJOBS_MAX_REQUEST_BYTES, or answered 413 with the API's error body before any
    view runs (FR-1 to FR-7: never a 500, nothing created).

    The web process serves ASGI, where Django reads a whole body before any middleware runs:
    there scrapejobs/asgi.py bounds every body, on every path, as it is read (NFR-19), and this
    middleware finds nothing left to refuse.

    Under WSGI, a body with a Content-Length over the limit is refused unread. Django would refuse it too
    (DATA_UPLOAD_MAX_MEMORY_SIZE is the same number), but by raising RequestDataTooBig from
    ``request.body``, which DRF reads before it calls a JSON parser: that was a 500. And
    a view that never reads its body (cancel) would act on the request and let the body go.

    A chunked body (``Transfer-Encoding: chunked``, no Content-Length) is accepted up to the limit,
    since many HTTP clients stream a body they have not measured. gunicorn decodes the chunks and
    passes no CONTENT_LENGTH, and Django bounds its view of ``wsgi.input`` by CONTENT_LENGTH, so
    without this a view saw an empty body (a submission was a 400, "url: required"). Here at most
    limit + 1 bytes are read from ``wsgi.input``: one byte more than the limit is a 413 (the rest
    is never read; gunicorn drains at most 64 KiB of it, then closes the connection); otherwise
    the request goes on as if it had come with that Content-Length. Reading to the end of the
    input is safe only when the server says the input ends there (``wsgi.input_terminated``, the
    WSGI extension gunicorn, mod_wsgi and Werkzeug set); a server that passes chunks through
    undecoded (wsgiref, behind ``runserver``) gets a 411 Length Required and nothing is read.

    The ordinary request costs one integer comparison (its Content-Length against the limit, read
    once when Django builds its middleware: reading a setting costs more than the rest together).
    """

    def __init__(self, get_response: Callable[[HttpRequest], Any]):
        self.get_response = get_response
        self.limit: int = settings.SCRAPEJOBS_MAX_REQUEST_BYTES
        self.batch_limit: int = settings.SCRAPEJOBS_BATCH_MAX_BYTES
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def _limit_for(self, request: HttpRequest) -> int:
        return self.batch_limit if request.path_info == BATCHES_PATH else self.limit

    # Both, so that under ASGI (scrapejobs/asgi.py) the chain stays async: a sync middleware makes
    # Django run every request, a ?wait= caller's too, in a thread of its own.
    sync_capable = True
    async_capable = True

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self.__acall__(request)
        refused = self._refusal(request)
        return refused if refused is not None else self.get_response(request)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        refused = self._refusal(request)
        return refused if refused is not None else await self.get_response(request)

    def _refusal(self, request: HttpRequest) -> HttpResponse | None:
        meta = request.META
        declared = meta.get("CONTENT_LENGTH")
        if declared:
            try:
                too_large = int(declared) > self._limit_for(request)
            except ValueError:
                too_large = False  # Django reads a malformed length as no body at all
            if too_large and _is_api(request):
                return self._too_large(request)
        elif "HTTP_TRANSFER_ENCODING" in meta and "wsgi.input" in meta and _is_api(request):
            return self._buffer_unmeasured_body(request)
        return None

    def _too_large(self, request: HttpRequest) -> HttpResponse:
        return too_large_response(path=request.path_info, limit=self._limit_for(request))

    def _buffer_unmeasured_body(self, request: HttpRequest) -> HttpResponse | None:
        meta = request.META
        if not meta.get("wsgi.input_terminated"):
            return api_error_response(length_required())
        limit = self._limit_for(request)
        try:
            body = _read_at_most(meta["wsgi.input"], limit + 1)
        except Exception:  # noqa: BLE001 - whatever the server's reader raises, the body is unreadable
            # gunicorn raises its ParseException subclasses for broken chunk framing and NoMoreData
            # (an OSError) for a client gone mid-body: the client's doing, a 400, not a 500.
            logger.info("unreadable request body on %s", request.path, exc_info=True)
            return api_error_response(body_unreadable())
        if len(body) > limit:
            return self._too_large(request)
        # Django reads a body through request._stream, which WSGIRequest bounded to nothing (no
        # CONTENT_LENGTH): give it the body, and the length it now has (DRF reads that too).
        request._stream = meta["wsgi.input"] = io.BytesIO(body)
        meta["CONTENT_LENGTH"] = str(len(body))
        return None


def too_large_response(*, path: str, limit: int) -> HttpResponse:
    """The 413, quoting the limit the path has (POST /batches has its own, larger one)."""
    error = payload_too_large()
    if path == BATCHES_PATH:
        error = ApiError(
            status_code=error.status_code,
            type=error.type,
            code=error.code,
            detail=f"The request body is over {limit} bytes (SCRAPEJOBS_BATCH_MAX_BYTES).",
        )
    return api_error_response(error)


def _read_at_most(stream: BinaryIO, size: int) -> bytes:
    """Up to ``size`` bytes, fewer only at the end of the stream (a WSGI input may return less
    than asked and still have more)."""
    parts: list[bytes] = []
    wanted = size
    while wanted > 0:
        part = stream.read(wanted)
        if not part:
            break
        parts.append(part)
        wanted -= len(part)
    return b"".join(parts)


class _SkippedForApi:
    """Runs the middleware it is mixed into for every path but the API's."""

    get_response: Callable[[HttpRequest], Any]

    def __call__(self, request: HttpRequest) -> Any:
        if _is_api(request):
            return self.get_response(request)
        return super().__call__(request)  # type: ignore[misc]


class BrowserSessionMiddleware(_SkippedForApi, SessionMiddleware):
    pass


class BrowserCsrfViewMiddleware(_SkippedForApi, CsrfViewMiddleware):
    def process_view(
        self, request: HttpRequest, callback: Callable[..., Any], callback_args: Any, callback_kwargs: Any
    ) -> HttpResponseForbidden | None:
        if _is_api(request):
            return None
        return super().process_view(request, callback, callback_args, callback_kwargs)


class BrowserAuthenticationMiddleware(_SkippedForApi, AuthenticationMiddleware):
    pass


class BrowserMessageMiddleware(_SkippedForApi, MessageMiddleware):
    pass


class AsyncWhiteNoiseMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise (the admin's and the API docs' static files), usable in an async chain.

    WhiteNoise's middleware is sync-only, and one sync middleware makes Django run the whole
    chain in a thread per request under ASGI: a ``?wait=`` caller would hold a thread blocked for
    its whole wait. Its request side is a dictionary look-up of the files found at start, no I/O,
    so it runs on the event loop; the file itself is streamed by Django as for any
    response."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        super().__init__(get_response)
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self.__acall__(request)
        return super().__call__(request)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        # WhiteNoise's __call__, awaiting the rest of the chain (autorefresh, for development
        # only, looks at the disk).
        if self.autorefresh:
            static_file = self.find_file(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is not None:
            return self.serve(static_file, request)
        return await self.get_response(request)


class _OnTheLoop:
    """Runs a Django middleware's ``process_request`` and ``process_response`` on the event loop
    under ASGI, for middleware whose hooks only read the request and set headers (no I/O, no
    database). Django's ``MiddlewareMixin`` hands each hook to a thread of the request's own
    instead: two thread hops per middleware per request, which were most of what a cached
    ``GET /jobs/{id}`` cost (bench read)."""

    get_response: Callable[[HttpRequest], Any]
    # apps/query/fast_read.py runs these hooks for the cached reads it answers before Django.
    hooks_on_the_loop = True

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        response = None
        process_request = getattr(self, "process_request", None)
        if process_request is not None:
            response = process_request(request)
        response = response or await self.get_response(request)
        process_response = getattr(self, "process_response", None)
        if process_response is not None:
            response = process_response(request, response)
        return response


class OnTheLoopSecurityMiddleware(_OnTheLoop, security.SecurityMiddleware):
    pass


class OnTheLoopCommonMiddleware(_OnTheLoop, common.CommonMiddleware):
    pass


class OnTheLoopXFrameOptionsMiddleware(_OnTheLoop, clickjacking.XFrameOptionsMiddleware):
    pass
