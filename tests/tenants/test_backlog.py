"""Backlog caps per tenant (FR-20): queued jobs and batches in progress, each with a service
default and a tenant's own in the admin; past a cap POST answers 429 with its code and
Retry-After and creates nothing. Through HTTP, against the real PostgreSQL."""

from __future__ import annotations

import json
import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client, override_settings

from apps.batches.loader import batch_load
from apps.batches.models import Batch
from apps.jobs.cancel_requeue import job_cancel
from apps.jobs.models import Job
from apps.tenants.backlog import tenant_backlog_counts_clear
from apps.tenants.models import Tenant

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs"
BATCHES = "/api/v1/batches"


@pytest.fixture(autouse=True)
def _fresh_counts(local_results):  # noqa: F811
    # Nested inside local_results's override, and undone before it: pytest-django's ``settings``
    # fixture, set up before local_results but changed after it, would be undone after it and
    # put local_results's storage back for every later test (tests/conftest.py checks for that).
    with override_settings(SCRAPEJOBS_TENANT_BACKLOG_RECOUNT_S=0):  # count on every POST: the cap is exact
        tenant_backlog_counts_clear()
        yield local_results
        tenant_backlog_counts_clear()


def _post_job(api, n: int, **headers):
    return api.post(JOBS, {"url": f"http://t.example/{n}"}, format="json", **headers)


def _post_batch(api, n: int, start: int = 0, **headers):
    body = [{"url": f"http://t.example/b{i}"} for i in range(start, start + n)]
    return api.post(BATCHES, data=json.dumps(body), content_type="application/json", **headers)


def _refused(response, code: str) -> None:
    assert response.status_code == 429, response.content
    assert response.json()["code"] == code and response.json()["type"] == "rate_limited"
    assert response["Retry-After"] == "30"


def test_a_tenant_at_its_queued_cap_gets_429_on_both_paths_and_room_comes_back_as_jobs_run(make_tenant):
    tenant, _, api = make_tenant()
    Tenant.objects.filter(id=tenant.id).update(max_queued_jobs=3)
    other, _, other_api = make_tenant()
    accepted = [_post_job(api, i) for i in range(3)]
    assert [r.status_code for r in accepted] == [202, 202, 202]

    _refused(_post_job(api, 3), "tenant_backlog_full")  # the lean path
    _refused(
        api.post(f"{JOBS}?format=json", {"url": "http://t.example/x"}, format="json"), "tenant_backlog_full"
    )
    assert Job.objects.filter(tenant_id=tenant.id).count() == 3
    assert _post_job(other_api, 0).status_code == 202  # another tenant is not held back

    job_cancel(job_id=accepted[0].json()["id"])  # one job leaves the queue: room for one
    assert _post_job(api, 4).status_code == 202
    _refused(_post_job(api, 5), "tenant_backlog_full")
    assert Job.objects.filter(tenant_id=tenant.id).count() == 4


def test_a_retry_under_an_idempotency_key_is_answered_as_before_when_the_backlog_is_full(make_tenant):
    tenant, _, api = make_tenant()
    Tenant.objects.filter(id=tenant.id).update(max_queued_jobs=1)
    first = _post_job(api, 1, HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == 202
    again = _post_job(api, 1, HTTP_IDEMPOTENCY_KEY="k1")
    assert (again.status_code, again["Idempotent-Replayed"], again.json()["id"]) == (
        202, "true", first.json()["id"],
    )  # fmt: skip
    _refused(_post_job(api, 2, HTTP_IDEMPOTENCY_KEY="k2"), "tenant_backlog_full")
    assert Job.objects.filter(tenant_id=tenant.id).count() == 1


def test_the_service_default_caps_a_tenant_without_its_own_and_zero_means_no_cap(settings, make_tenant):
    settings.SCRAPEJOBS_TENANT_MAX_QUEUED_JOBS = 2
    _, _, api = make_tenant()
    assert [_post_job(api, i).status_code for i in range(3)] == [202, 202, 429]
    uncapped, _, uncapped_api = make_tenant()
    Tenant.objects.filter(id=uncapped.id).update(max_queued_jobs=0)
    assert {_post_job(uncapped_api, i).status_code for i in range(4)} == {202}


@pytest.mark.django_db(transaction=True)
def test_concurrent_posts_of_one_process_never_pass_the_cap(settings, make_tenant):
    # The process's count is trusted for a minute: what it accepted meanwhile is added to it.
    settings.SCRAPEJOBS_TENANT_BACKLOG_RECOUNT_S = 60
    tenant, _, api = make_tenant()
    Tenant.objects.filter(id=tenant.id).update(max_queued_jobs=5)
    codes: list[int] = []
    barrier = threading.Barrier(12)

    def post(i: int) -> None:
        barrier.wait()
        try:
            codes.append(_post_job(api, i).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [202] * 5 + [429] * 7
    assert Job.objects.filter(tenant_id=tenant.id).count() == 5


def test_a_batch_over_the_room_left_is_refused_whole_and_one_that_fits_is_taken(make_tenant, _fresh_counts):
    tenant, _, api = make_tenant()
    Tenant.objects.filter(id=tenant.id).update(max_queued_jobs=5)
    assert [_post_job(api, i).status_code for i in range(2)] == [202, 202]
    _refused(_post_batch(api, 4), "tenant_backlog_full")
    assert Batch.objects.count() == 0 and not list(_fresh_counts.rglob("*.parquet"))
    assert Job.objects.filter(tenant_id=tenant.id).count() == 2

    taken = _post_batch(api, 3)
    assert taken.status_code == 202, taken.content
    # Its rows are not jobs yet (not loaded) but they count against another batch: full.
    _refused(_post_batch(api, 1, start=10), "tenant_backlog_full")
    assert batch_load(batch_id=taken.json()["id"]) == "loaded"
    assert Job.objects.filter(tenant_id=tenant.id, status="queued").count() == 5
    _refused(_post_job(api, 9), "tenant_backlog_full")


def test_batches_in_progress_are_capped_and_a_loaded_batch_frees_its_place(make_tenant):
    tenant, _, api = make_tenant()
    Tenant.objects.filter(id=tenant.id).update(max_batches_in_progress=1)
    first = _post_batch(api, 2)
    assert first.status_code == 202
    _refused(_post_batch(api, 2, start=5), "tenant_batches_full")
    assert Batch.objects.filter(tenant_id=tenant.id).count() == 1
    # A replay of the accepted batch is answered as before.
    keyed, _, keyed_api = make_tenant()
    Tenant.objects.filter(id=keyed.id).update(max_batches_in_progress=1)
    assert _post_batch(keyed_api, 1, HTTP_IDEMPOTENCY_KEY="b").status_code == 202
    assert _post_batch(keyed_api, 1, HTTP_IDEMPOTENCY_KEY="b")["Idempotent-Replayed"] == "true"

    assert batch_load(batch_id=first.json()["id"]) == "loaded"
    assert _post_batch(api, 2, start=5).status_code == 202


def test_an_operator_sets_a_tenants_caps_in_the_admin(make_tenant):
    tenant, _, api = make_tenant(name="crawler")
    browser = Client()
    browser.force_login(get_user_model().objects.create_superuser("root", "root@example.test", "pw"))
    page = browser.get(f"/admin/tenants/tenant/{tenant.pk}/change/")
    assert b'name="max_queued_jobs"' in page.content and b'name="max_batches_in_progress"' in page.content
    r = browser.post(
        f"/admin/tenants/tenant/{tenant.pk}/change/",
        {"name": "crawler", "rate_limit_per_second": "", "is_active": "on", "weight": "1", "obey_robots": "on",
         "max_queued_jobs": "1", "max_batches_in_progress": "0",
         "tokens-TOTAL_FORMS": "0", "tokens-INITIAL_FORMS": "0"},
    )  # fmt: skip
    assert r.status_code == 302, r.content[:2000]
    assert Tenant.objects.filter(pk=tenant.pk).values_list("max_queued_jobs", "max_batches_in_progress").get() == (
        1, 0,
    )  # fmt: skip
    # The token cache holds the tenant as it was for SCRAPEJOBS_TOKEN_CACHE_S; a fresh process sees it.
    from apps.tenants import services

    services._token_cache.clear()
    assert _post_job(api, 1).status_code == 202
    _refused(_post_job(api, 2), "tenant_backlog_full")
