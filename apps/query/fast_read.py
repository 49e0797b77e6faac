"""GET /jobs/{id} answered from the read cache before Django's request handling.

Status polling is the read side's hot path. Under ASGI, Django hands a request's synchronous
parts to a thread made for that request (its start signal, the DRF view, the response's close):
for a job the cache holds, that hand-over cost three times what the read itself did, so the cache
bought 1.5x where the aim was 3x (``make bench BENCH=read``). Here a plain read (GET, no query
string) of a job the cache holds, by a token this process remembers, is answered on the event
loop with the same parts Django would use:

- Django's own request object (``ASGIRequest``): host validation (ALLOWED_HOSTS), scheme and
  proxy settings, headers;
- the middleware that runs on the loop (``hooks_on_the_loop`` in scrapejobs/middleware.py: security, common,
  X-Frame-Options), request side and response side, in the configured order;
- the token cache (``token_cached``), the per-token rate limit (``token_rate_take_async``, spent once:
  after the cache answered, so a miss that goes on to Django is charged there only), the cache
  entry (``job_cached_async``) and the representation (``job_representation``), rendered by DRF's
  JSON renderer with the headers the DRF view sets;
- the request metrics (``recorder``), under the route Django would have matched.

Anything else goes to Django, which answers it as before: a token not remembered (its first use
in this process), a job not in the cache or another tenant's, a refusal of any kind (no or bad
token, rate limit, a middleware's redirect or refusal), ``?wait=``, an ``Accept`` other than
JSON or ``*/*`` (DRF's 406, its ``indent``), a path Django would not match (a trailing newline),
a request with a body. tests/query/test_fast_read.py
holds the two paths' answers side by side.

The Redis calls (cache entry, rate limit) are those Django's path makes, through redis.asyncio
and awaited (NFR-21): a slow Redis holds up the read that waits for it, never the other
connections of the process; a Redis that hangs costs the fail-open client's short timeout, after
which both skip Redis for a second.
"""

from __future__ import annotations

import functools
import io
import re
import time
import uuid
from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse
from django.urls import resolve
from django.utils.module_loading import import_string
from rest_framework.renderers import JSONRenderer

from apps.api.paths import API_V1_BASE
from apps.api.serializers import base_url, job_representation
from apps.operators.request_metrics import recorder
from apps.query.cache import job_cached_async
from apps.tenants.authentication import TenantPrincipal
from apps.tenants.services import token_cached
from apps.tenants.throttling import token_rate_take_async

# Matched whole (fullmatch): a "$" would also match before a trailing newline ("%0A"), a path
# Django answers 404.
JOB_PATH = re.compile(
    re.escape(API_V1_BASE)
    + r"/jobs/([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
)
# The Accept values the DRF view answers with its plain JSON: any other (text/html is a 406,
# "application/json; indent=4" is indented JSON, a list is negotiated) is Django's to answer.
PLAIN_ACCEPT = frozenset({b"", b"*/*", b"application/json"})
# What the DRF view of this URL sets on its answers (an APIView with only the JSON renderer).
VIEW_HEADERS = {"Allow": "GET, DELETE, HEAD, OPTIONS"}
_renderer = JSONRenderer()


def _never(request: HttpRequest) -> HttpResponse:
    raise AssertionError("the fast path never calls the rest of the chain")


@functools.cache
def _chain() -> tuple[list[Any], str]:
    """Built once per process, on the first cached read: instances of the configured middleware
    whose hooks run on the loop (they say so with ``hooks_on_the_loop``, scrapejobs/middleware.py),
    in their order, and the route Django matches for every job's path (the request metrics'
    label)."""
    middleware = [
        cls(_never)
        for cls in map(import_string, settings.MIDDLEWARE)
        if getattr(cls, "hooks_on_the_loop", False)
    ]
    route = resolve(f"{API_V1_BASE}/jobs/{uuid.UUID(int=0)}").route
    return middleware, route


def _plain_headers(headers: list[tuple[bytes, bytes]]) -> bool:
    """No body (a GET's body is still bounded and read by Django's path: a body over the limit is
    its 413) and an Accept the view answers with plain JSON."""
    accept = b""
    for name, value in headers:
        if name == b"accept":
            accept = value.strip()
        elif name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return False
    return accept in PLAIN_ACCEPT


async def answer_from_cache(scope: dict[str, Any]) -> HttpResponse | None:
    """The answer to a plain cached read, or None for Django to answer the request."""
    if scope["method"] != "GET" or scope["query_string"]:
        return None
    match = JOB_PATH.fullmatch(scope["path"])
    if match is None or not _plain_headers(scope["headers"]):
        return None
    started = time.perf_counter()
    request = ASGIRequest(scope, io.BytesIO())
    scheme, _, raw = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        return None
    found = token_cached(raw=raw.strip())
    if found is None:
        return None
    tenant, token = found
    job = await job_cached_async(tenant_id=tenant.id, job_id=uuid.UUID(match[1]))
    if job is None:
        return None
    middleware, route = _chain()
    try:
        for each in middleware:
            hook = getattr(each, "process_request", None)
            if hook is not None and hook(request) is not None:
                return None  # a redirect or a refusal: Django's to give
        base = base_url(request)
    except Exception:  # noqa: BLE001 - DisallowedHost, a refusal: Django answers whatever it was
        return None
    allowed, _ = await token_rate_take_async(TenantPrincipal(tenant, token))
    if not allowed:
        return None  # Django refuses it with its 429 (a refusal spends nothing)
    response = HttpResponse(
        _renderer.render(job_representation(job, base=base)), content_type="application/json", status=200
    )
    for name, value in VIEW_HEADERS.items():
        response[name] = value
    for each in reversed(middleware):
        hook = getattr(each, "process_response", None)
        if hook is not None:
            response = hook(request, response)
    recorder.record(
        route=route, method="GET", status=response.status_code, seconds=time.perf_counter() - started
    )
    return response
