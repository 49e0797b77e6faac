"""A tenant's daily usage (FR-49, docs/usage.md): jobs submitted over HTTP, run through the jobs
services (claim, receipt fold), folded by the rollup task, read back through GET /usage."""

from __future__ import annotations

import json
from datetime import date, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.jobs.intake import job_create
from apps.jobs.models import Job
from apps.jobs.receipts import ResultStored
from apps.operators.models import TenantUsageDay
from apps.operators.rollup_runner import USAGE_RETENTION_DAYS, rollup_run, rollups_prune
from apps.tenants.models import TokenScope
from apps.tenants.services import token_create
from tests.query import helpers

pytestmark = pytest.mark.django_db

USAGE = "/api/v1/usage"
JOBS = "/api/v1/jobs"


@pytest.fixture(autouse=True)
def _results_here(local_results):
    return local_results


def _submit(api, url: str) -> Job:
    r = api.post(JOBS, {"url": url}, format="json")
    assert r.status_code == 202, r.content
    return Job.objects.get(id=r.json()["id"])


def _stored(size: int) -> ResultStored:
    return ResultStored(
        key=f"results/{size}.bin", size=size, sha256="ab" * 32, content_type="text/html", http_status=200
    )


def _claimed(job: Job) -> Job:
    from apps.jobs.claims import job_claim

    assert job_claim(job_id=job.id, worker="w-test") is not None
    return Job.objects.get(id=job.id)


def _usage(api, first: date, last: date) -> dict:
    r = api.get(USAGE, {"from": first.isoformat(), "to": last.isoformat()})
    assert r.status_code == 200, r.content
    return r.json()


def test_usage_counts_the_jobs_run_attempts_by_outcome_bytes_and_renders_per_tenant(make_tenant):
    tenant, _, api = make_tenant()
    other, _, other_api = make_tenant()
    today = timezone.now().date()

    # Tenant A: a success of 100 bytes; a temporary failure then a 50-byte success (one job, two
    # attempts); a permanent failure; a browser render of 7 bytes; a job never claimed.
    helpers.finish(_claimed(_submit(api, "http://a.example/1")), result=_stored(100))
    retried = helpers.finish(
        _claimed(_submit(api, "http://a.example/2")),
        outcome="failed_temporary",
        error_class="timeout",
        error="timed out",
    )
    Job.objects.filter(id=retried.id).update(not_before=None)
    helpers.finish(_claimed(retried), result=_stored(50))
    failing = _submit(api, "http://a.example/3")
    Job.objects.filter(id=failing.id).update(max_attempts=1, attempt_budget=1)
    helpers.finish(
        _claimed(failing),
        outcome="failed_permanent",
        http_status=404,
        error_class="http_404",
        error="Not Found",
    )
    rendered, _ = job_create(
        tenant_id=tenant.id, url="http://a.example/r", domain="a.example", render="browser"
    )
    helpers.finish(_claimed(rendered), result=_stored(7))
    _submit(api, "http://a.example/never-claimed")
    r = api.post("/api/v1/crawls", {"seeds": ["http://a.example/"], "max_pages": 1}, format="json")
    assert r.status_code in (201, 202), r.content
    r = api.post(
        "/api/v1/batches", data=json.dumps([{"url": "http://a.example/b"}]), content_type="application/json"
    )
    assert r.status_code == 202, r.content
    # Tenant B: one success of 1,000 bytes.
    helpers.finish(_claimed(_submit(other_api, "http://b.example/1")), result=_stored(1000))

    assert rollup_run(settle_s=0) == 6
    assert rollup_run(settle_s=0) == 0  # folded once: a second run adds nothing

    mine = _usage(api, today - timedelta(days=1), today)
    assert [d["date"] for d in mine["days"]] == [(today - timedelta(days=1)).isoformat(), today.isoformat()]
    yesterday, day = mine["days"]
    assert yesterday["jobs_submitted"] == 0 and sum(yesterday["attempts"].values()) == 0
    assert day["jobs_submitted"] == 4  # the unclaimed job and the crawl's page have had no attempt
    assert day["attempts"] == {
        "succeeded": 3,
        "failed_temporary": 1,
        "failed_permanent": 1,
        "cancelled": 0,
        "lost": 0,
        "deferred": 0,
    }
    assert day["bytes_stored"] == 157
    assert day["rendered_pages"] == 1
    assert (day["batches"], day["crawls"]) == (1, 1)
    assert mine["totals"] == {k: v for k, v in day.items() if k != "date"}
    assert (mine["from"], mine["to"]) == ((today - timedelta(days=1)).isoformat(), today.isoformat())

    theirs = _usage(other_api, today, today)["days"][0]
    assert (theirs["jobs_submitted"], theirs["attempts"]["succeeded"], theirs["bytes_stored"]) == (1, 1, 1000)
    assert (theirs["attempts"]["failed_permanent"], theirs["crawls"], theirs["batches"]) == (0, 0, 0)


def test_a_job_submitted_one_day_and_tried_the_next_counts_its_submission_on_the_first(make_tenant):
    tenant, _, api = make_tenant()
    job = _submit(api, "http://a.example/")
    yesterday = timezone.now() - timedelta(days=1)
    Job.objects.filter(id=job.id).update(created_at=yesterday)
    helpers.finish(_claimed(job), result=_stored(10))
    rollup_run(settle_s=0)
    before, today = _usage(api, yesterday.date(), timezone.now().date())["days"]
    assert (before["jobs_submitted"], sum(before["attempts"].values())) == (1, 0)
    assert (today["jobs_submitted"], today["attempts"]["succeeded"], today["bytes_stored"]) == (0, 1, 10)


def test_a_read_token_reads_usage(make_tenant):
    tenant, _, _ = make_tenant()
    from rest_framework.test import APIClient

    reader = APIClient()
    reader.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token_create(tenant=tenant, name='r', scope=TokenScope.READ)}"
    )
    today = timezone.now().date()
    assert len(_usage(reader, today, today)["days"]) == 1


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"to": "2026-12-01"}, "from"),
        ({"from": "2026-12-01"}, "to"),
        ({"from": "2026-13-01", "to": "2026-12-31"}, "from"),
        ({"from": "2026-12-01", "to": "31/12/2026"}, "to"),
        ({"from": "2026-12-01T00:00:00", "to": "2026-12-31"}, "from"),
        ({"from": "2026-12-31", "to": "2026-12-01"}, "to"),
        ({"from": "2025-12-01", "to": "2026-12-02"}, "to"),  # 367 days
        ({"from": "2026-12-01", "to": "2026-12-31", "tenant": "x"}, "tenant"),
    ],
)
def test_bad_parameters_are_400_naming_the_field(api, params, field):
    r = api.get(USAGE, params)
    assert r.status_code == 400, r.content
    assert field in json.dumps(r.json()), r.json()


def test_a_range_of_366_days_is_accepted_and_every_day_is_there(api):
    body = _usage(api, date(2025, 12, 1), date(2026, 12, 1))
    assert len(body["days"]) == 366 and body["totals"]["jobs_submitted"] == 0


def test_usage_needs_a_token(client):
    assert client.get(USAGE, {"from": "2026-12-01", "to": "2026-12-01"}).status_code == 401


def test_usage_reads_the_rollup_never_the_ledger(make_tenant):
    tenant, _, api = make_tenant()
    helpers.finish(_claimed(_submit(api, "http://a.example/")), result=_stored(1))
    rollup_run(settle_s=0)
    today = timezone.now().date()
    with CaptureQueriesContext(connection) as queries:
        _usage(api, today - timedelta(days=30), today)
    statements = " ".join(q["sql"] for q in queries.captured_queries)
    assert "operators_tenantusageday" in statements
    assert "jobs_job" not in statements and "jobs_attempt" not in statements


def test_usage_days_are_kept_thirteen_months_then_pruned(make_tenant):
    tenant, _, _ = make_tenant()
    now = timezone.now()
    kept = (now - timedelta(days=USAGE_RETENTION_DAYS)).date()
    for day in (kept, kept - timedelta(days=1)):
        TenantUsageDay.objects.create(tenant=tenant, day=day, outcome="succeeded", attempts=1)
    rollups_prune(now=now)
    assert list(TenantUsageDay.objects.values_list("day", flat=True)) == [kept]
    assert USAGE_RETENTION_DAYS >= 13 * 31 - 6  # 13 months back from any day
