"""The read cache of GET /api/v1/jobs/{id}: requests in, database queries
counted, real Redis (and a Redis cut off by a TCP proxy), real PostgreSQL."""

from __future__ import annotations

import threading
import time
from urllib.parse import urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from apps.query import cache
from tests.query import helpers
from tests.support.tcp_proxy import TcpProxy

JOBS = "/api/v1/jobs"

# A loaded machine must not stand in for a slow Redis here (tests/query/conftest.py).
pytestmark = pytest.mark.usefixtures("patient_fail_open_redis")


def _job_selects(ctx: CaptureQueriesContext) -> int:
    return sum(1 for q in ctx.captured_queries if 'FROM "jobs_job"' in q["sql"])


@pytest.mark.django_db
def test_polling_a_final_job_1000_times_reads_the_database_once(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.succeeded(tenant)
    with CaptureQueriesContext(connection) as ctx:
        for _ in range(1000):
            r = api.get(f"{JOBS}/{job.id}")
            assert r.status_code == 200 and r.json()["status"] == "succeeded"
    assert _job_selects(ctx) == 1


@pytest.mark.django_db
def test_another_tenant_never_reads_a_job_through_the_cache(make_tenant):
    tenant, _, api = make_tenant()
    _, _, other = make_tenant()
    job = helpers.succeeded(tenant)
    assert api.get(f"{JOBS}/{job.id}").status_code == 200  # now cached
    r = other.get(f"{JOBS}/{job.id}")
    assert r.status_code == 404
    assert r.json()["code"] == "not_found"


@pytest.mark.django_db
def test_a_cached_job_answers_exactly_as_the_database_does(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.failed(tenant)
    from_db = api.get(f"{JOBS}/{job.id}").json()
    from_cache = api.get(f"{JOBS}/{job.id}").json()
    assert from_cache == from_db
    assert from_db["last_error"]["http_status"] == 404


@pytest.mark.django_db(transaction=True)
def test_ten_clients_polling_a_running_job_read_the_database_once_per_ttl(make_tenant, monkeypatch):
    tenant, token, _ = make_tenant()
    job = helpers.running(tenant)
    reads: list[float] = []
    real_job_get = cache.job_get

    def counted_job_get(**kw):
        reads.append(time.monotonic())
        return real_job_get(**kw)

    monkeypatch.setattr(cache, "job_get", counted_job_get)
    errors: list[str] = []
    stop = time.monotonic() + 5.0

    def poll() -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        try:
            while time.monotonic() < stop:
                r = client.get(f"{JOBS}/{job.id}")
                if r.status_code != 200 or r.json()["status"] != "running":
                    errors.append(r.content.decode())
        finally:
            connection.close()

    threads = [threading.Thread(target=poll) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # 5 s of polling with a 2 s TTL: the key is filled at 0, 2 and 4 s.
    assert len(reads) <= 3, reads


@pytest.mark.django_db
def test_with_redis_unreachable_reads_go_to_the_database(make_tenant, settings, monkeypatch):
    tenant, _, api = make_tenant()
    job = helpers.running(tenant)
    redis_url = urlsplit(settings.REDIS_URL)
    proxy = TcpProxy(upstream_host=redis_url.hostname, upstream_port=redis_url.port or 6379).start()
    try:
        settings.REDIS_URL = f"redis://127.0.0.1:{proxy.port}{redis_url.path}"
        monkeypatch.setattr(cache, "_redis_paused_until", 0.0)
        assert api.get(f"{JOBS}/{job.id}").json()["status"] == "running"  # through Redis
        proxy.cut()
        helpers.finish(job)
        for _ in range(3):
            r = api.get(f"{JOBS}/{job.id}")
            assert r.status_code == 200, r.content
            assert r.json()["status"] == "succeeded"
    finally:
        proxy.stop()
