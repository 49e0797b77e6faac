"""GET /jobs/{id} answered from the read cache before Django (apps/query/fast_read.py, issue 10
item 3, NFR-13): the ASGI application called in-process with real scopes, against real Redis and
PostgreSQL. The fast path must answer exactly what Django answers, and leave to Django whatever
it is not sure of."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import redis
import redis.asyncio
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

import scrapejobs.asgi
from apps.operators.request_metrics import recorder
from apps.query import cache
from tests.query import helpers

# A loaded machine must not stand in for a slow Redis here (tests/query/conftest.py).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("patient_fail_open_redis")]

ROUTE = "api/v1/jobs/<str:job_id>"


def call(
    app: Any,
    path: str,
    *,
    token: str | None,
    host: str = "testserver",
    query: bytes = b"",
    method: str = "GET",
    extra_headers: tuple[tuple[bytes, bytes], ...] = (),
    body: bytes = b"",
) -> tuple[int, dict[str, str], bytes]:
    """One request through an ASGI application: (status, headers, body)."""
    headers = [(b"host", host.encode())]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    headers.extend(extra_headers)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }
    sent: list[dict[str, Any]] = []

    async def run() -> None:
        given = False

        async def receive() -> dict[str, Any]:
            nonlocal given
            if given:
                await asyncio.Event().wait()  # the client stays until the answer
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)

    asyncio.run(run())
    start = sent[0]
    names = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], names, b"".join(m.get("body", b"") for m in sent[1:])


@pytest.fixture
def no_django(monkeypatch):
    """Django's handler made to fail: what still answers was answered by the fast path."""
    calls: list[str] = []

    async def refuse(scope, receive, send):
        calls.append(scope["path"])
        raise AssertionError(f"Django was asked for {scope['path']}")

    def switch_off() -> list[str]:
        monkeypatch.setattr(scrapejobs.asgi, "django_application", refuse)
        return calls

    return switch_off


def _django(path: str, **kw: Any) -> tuple[int, dict[str, str], bytes]:
    return call(scrapejobs.asgi.django_application, path, **kw)


def _app(path: str, **kw: Any) -> tuple[int, dict[str, str], bytes]:
    return call(scrapejobs.asgi.application, path, **kw)


def test_a_cached_read_is_answered_before_django_exactly_as_django_answers_it(make_tenant, no_django):
    tenant, token, _ = make_tenant()
    job = helpers.failed(tenant)
    path = f"/api/v1/jobs/{job.id}"
    status, django_headers, django_body = _django(path, token=token)  # fills the token and job caches
    assert status == 200
    no_django()
    with CaptureQueriesContext(connection) as queries:
        fast = [_app(path, token=token) for _ in range(20)]
    assert len(queries) == 0
    for status, headers, body in fast:
        assert status == 200
        assert json.loads(body) == json.loads(django_body)
        assert headers == django_headers | {"content-length": str(len(body))}
    assert {"x-frame-options", "x-content-type-options", "referrer-policy", "allow"} <= set(fast[0][1])


def test_the_fast_path_counts_in_the_request_metrics_under_djangos_route(make_tenant, no_django):
    tenant, token, _ = make_tenant()
    job = helpers.succeeded(tenant)
    path = f"/api/v1/jobs/{job.id}"
    assert _django(path, token=token)[0] == 200
    recorder.flush()
    no_django()
    key = f"n\t{ROUTE}\tGET\t200"
    before = recorder._pending.counts[key]
    for _ in range(3):
        assert _app(path, token=token)[0] == 200
    assert recorder._pending.counts[key] - before == 3


@pytest.mark.parametrize(
    "case",
    [
        "token not remembered",
        "another tenant",
        "wait",
        "unknown query",
        "bad host",
        "no token",
        "not cached",
        "HEAD",
        "accept html",
        "accept indent",
        "trailing newline",
        "small body",
    ],
)
def test_whatever_the_fast_path_is_not_sure_of_goes_to_django(make_tenant, case):
    tenant, token, _ = make_tenant()
    _, other_token, _ = make_tenant()
    job = helpers.succeeded(tenant)
    path = f"/api/v1/jobs/{job.id}"
    assert _django(path, token=token)[0] == 200  # the job and the token are cached
    assert (
        _django(f"/api/v1/jobs/{helpers.queued(tenant).id}", token=other_token)[0] == 404
    )  # other remembered
    kw: dict[str, Any] = {"token": token}
    expected = 200
    if case == "token not remembered":
        from apps.tenants import services

        services._token_cache.clear()
    elif case == "another tenant":
        kw["token"], expected = other_token, 404
    elif case == "wait":
        kw["query"] = b"wait=1"
    elif case == "unknown query":
        kw["query"], expected = b"colour=red", 400
    elif case == "bad host":
        kw["host"], expected = "evil.example", 400
    elif case == "no token":
        kw["token"], expected = None, 401
    elif case == "not cached":
        cache.job_cache_forget([str(job.id)])
    elif case == "HEAD":
        kw["method"] = "HEAD"
    elif case == "accept html":
        kw["extra_headers"], expected = ((b"accept", b"text/html"),), 406
    elif case == "accept indent":
        kw["extra_headers"] = ((b"accept", b"application/json; indent=4"),)
    elif case == "trailing newline":
        path, expected = path + "\n", 404
    elif case == "small body":
        kw["extra_headers"], kw["body"] = ((b"content-length", b"2"),), b"{}"
    asked: list[str] = []
    real = scrapejobs.asgi.django_application

    async def counting(scope, receive, send):
        asked.append(scope["path"])
        await real(scope, receive, send)

    scrapejobs.asgi.django_application = counting
    try:
        status, _, body = _app(path, **kw)
    finally:
        scrapejobs.asgi.django_application = real
    assert status == expected, body
    assert asked == [path]
    if case == "accept indent":
        assert body.startswith(b'{\n    "id"'), body  # DRF's indent, which the fast path does not do


def test_the_rate_limit_is_spent_once_per_request_on_either_path(make_tenant, monkeypatch):
    """Burst 5 at 1 request/s: 5 answers, then 429s, whether Django or the fast path
    answered (the fast path reads the cache before it spends the token, and a miss spends it on
    Django's path only)."""
    monkeypatch.setattr(settings, "SCRAPEJOBS_RATE_LIMIT_BURST", 5)
    tenant, token, _ = make_tenant(rate_limit_per_second=1)
    job = helpers.succeeded(tenant)
    cache.job_cache_forget([str(job.id)])
    path = f"/api/v1/jobs/{job.id}"
    started = time.monotonic()
    statuses = [_app(path, token=token)[0] for _ in range(8)]
    refilled = int(time.monotonic() - started)  # 1 request/s: a slow machine earns one more a second
    assert statuses[:5] == [200] * 5  # the first (Django's path) spent one token, not two
    assert statuses.count(200) <= 5 + refilled, statuses  # and every answer spent one


def test_with_redis_gone_reads_go_to_django_and_the_database(make_tenant, monkeypatch):
    tenant, token, _ = make_tenant()
    job = helpers.succeeded(tenant)
    path = f"/api/v1/jobs/{job.id}"
    assert _django(path, token=token)[0] == 200
    dead = redis.Redis(host="127.0.0.1", port=1, socket_timeout=0.1, socket_connect_timeout=0.1)
    monkeypatch.setattr(cache, "fail_open_redis", lambda: dead)
    # The fast path's client (redis.asyncio, on the loop) is as dead.
    monkeypatch.setattr(
        cache,
        "fail_open_redis_async",
        lambda: redis.asyncio.Redis(host="127.0.0.1", port=1, socket_timeout=0.1, socket_connect_timeout=0.1),
    )
    monkeypatch.setattr(cache, "_redis_paused_until", 0.0)
    status, _, body = _app(path, token=token)
    assert status == 200 and json.loads(body)["status"] == "succeeded"


def test_a_get_with_a_body_over_the_limit_is_a_413_not_a_cached_read(make_tenant):
    tenant, token, _ = make_tenant()
    job = helpers.succeeded(tenant)
    path = f"/api/v1/jobs/{job.id}"
    assert _django(path, token=token)[0] == 200  # the job and the token are cached
    too_large = b"x" * (settings.SCRAPEJOBS_MAX_REQUEST_BYTES + 1)
    for framing in ((b"content-length", str(len(too_large)).encode()), (b"transfer-encoding", b"chunked")):
        status, _, body = _app(path, token=token, extra_headers=(framing,), body=too_large)
        assert status == 413, (framing, body)
        assert json.loads(body)["code"] == "payload_too_large"
