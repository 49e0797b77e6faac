"""GET /jobs/{id} says what a queued job waits for and from when it may start:
each case is reached through the path that causes it (the worker's gate against the real Redis,
a real fetch and the writer's fold for a retry, the publisher for a sent job), then read over
HTTP."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.jobs.models import Job
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.politeness.limiter import domain_outcome_record
from apps.politeness.models import DomainPolicy
from apps.politeness.selectors import domain_limits_cache_clear
from apps.publishing.publisher import outbox_publish_batch
from apps.redis_clients import state_redis
from apps.scraping.attempt import job_run_attempt
from apps.scraping.domain_turn import job_domain_turn

pytestmark = pytest.mark.django_db

DOMAIN = "127.0.0.1"


@pytest.fixture(autouse=True)
def _no_read_cache(settings):
    """Each test reads the job right after the publisher, the gate or the writer moved it: the read
    cache would answer with the row of up to SCRAPEJOBS_READ_CACHE_TTL_S ago (tests/query/test_cache.py
    covers that staleness); here the answer must be the row's."""
    settings.SCRAPEJOBS_READ_CACHE_TTL_S = 0


@pytest.fixture(autouse=True)
def _fresh_policy_cache():
    domain_limits_cache_clear()
    yield
    domain_limits_cache_clear()


def _policy(**limits: float) -> None:
    DomainPolicy.objects.create(
        domain=DOMAIN, **{"requests_per_second": 100, "burst": 100, "max_concurrency": 10, **limits}
    )
    domain_limits_cache_clear()


def _submit(api, url: str) -> str:
    response = api.post("/api/v1/jobs", {"url": url}, format="json")
    assert response.status_code == 202, response.content
    return response.json()["id"]


def _waiting(api, job_id: str) -> tuple[str | None, datetime | None]:
    body = api.get(f"/api/v1/jobs/{job_id}").json()
    until = body["waiting_until"]
    return body["waiting_for"], None if until is None else datetime.fromisoformat(until)


def _published(job_id: str) -> None:
    """The publisher sends every due job (the broker is not read here: the job is not taken)."""
    outbox_publish_batch(limit=100)
    assert Job.objects.get(id=job_id).published_at is not None


def _run(job_id: str) -> None:
    """A worker takes the job's message: gate, claim, fetch; the writer folds the receipt."""
    receipt = job_run_attempt(job_id=job_id, worker="w:1:1")
    if receipt is not None:
        attempts_apply_finished([receipt])


def _not_before(job_id: str) -> datetime | None:
    return Job.objects.get(id=job_id).not_before


def test_a_new_job_waits_for_its_tenants_turn_then_for_a_worker(api, target):
    job_id = _submit(api, target.url("/bytes/10"))
    assert _waiting(api, job_id) == ("tenant_share", None)
    _published(job_id)
    assert _waiting(api, job_id) == ("dispatch", None)


def test_a_job_refused_by_its_domains_rate_says_so_and_until_when(api, target):
    _policy(requests_per_second=0.2, burst=1)
    first, second = _submit(api, target.url("/bytes/10")), _submit(api, target.url("/bytes/10"))
    _published(first)
    _run(first)  # the domain's one token
    _run(second)
    reason, until = _waiting(api, second)
    assert reason == "domain_rate"
    assert until == _not_before(second) and until > timezone.now() + timedelta(seconds=3)
    assert Job.objects.get(id=second).attempts == 0


def test_a_job_refused_because_its_domain_is_at_its_concurrency_cap_says_so(api, target):
    _policy(max_concurrency=1, requests_per_second=0.2, burst=10)  # refusals wait 1/rate: 5 s
    holder, refused = _submit(api, target.url("/bytes/10")), _submit(api, target.url("/bytes/10"))
    _published(holder)
    with job_domain_turn(job_id=holder) as turn:
        assert turn is not None
        _run(refused)
    reason, until = _waiting(api, refused)
    assert reason == "domain_concurrency" and until == _not_before(refused)


def test_a_job_with_others_before_it_in_its_domains_line_says_it_waits_for_its_turn(api, target):
    """NFR-9, NFR-10 at the gate: the second refused job is not next when a permit frees, and
    says so; its waiting_until is the estimate of its turn, after the first one's."""
    _policy(max_concurrency=1, requests_per_second=0.2, burst=10)
    holder = _submit(api, target.url("/bytes/10"))
    first, second = _submit(api, target.url("/bytes/10")), _submit(api, target.url("/bytes/10"))
    _published(holder)
    with job_domain_turn(job_id=holder) as turn:
        assert turn is not None
        _run(first)
        _run(second)
    assert _waiting(api, first)[0] == "domain_concurrency"
    reason, until = _waiting(api, second)
    assert reason == "domain_turn" and until == _not_before(second)
    assert until >= _waiting(api, first)[1] + timedelta(seconds=4)  # one permit (1/rate: 5 s) later


def test_a_job_whose_domain_asked_us_to_back_off_says_the_domain_is_paused(api, target):
    job_id = _submit(api, target.url("/bytes/10"))
    _published(job_id)
    domain_outcome_record(domain=DOMAIN, http_status=429, retry_after_s=30)  # Retry-After: 30
    _run(job_id)
    reason, until = _waiting(api, job_id)
    assert reason == "domain_paused"
    assert until == _not_before(job_id) and until > timezone.now() + timedelta(seconds=20)
    assert target.requests == []


def test_a_job_whose_gate_could_not_be_read_waits_for_dispatch_until_its_retry_time(api, target):
    job_id = _submit(api, target.url("/bytes/10"))
    _published(job_id)
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):  # nothing listens on port 1
        state_redis.cache_clear()
        try:
            _run(job_id)
        finally:
            state_redis.cache_clear()
    reason, until = _waiting(api, job_id)
    assert reason == "dispatch" and until == _not_before(job_id)


@pytest.mark.django_db(transaction=True)  # the publisher's now() must move on
def test_a_job_backing_off_after_a_failed_attempt_says_retry_backoff_not_its_older_domain_wait(
    api, target, settings
):
    """The domain deferred it first (its reason stored); then it ran and failed temporarily: the
    retry's wait is what it waits for now."""
    # Full jitter draws the wait from [0, base): a wide range keeps it from passing before the GET.
    settings.SCRAPEJOBS_RETRY_BASE_S = settings.SCRAPEJOBS_RETRY_CAP_S = 1_000_000.0
    _policy(requests_per_second=1, burst=1)
    first, job_id = _submit(api, target.url("/bytes/10")), _submit(api, target.url("/status/503"))
    _published(first)
    _run(first)
    _run(job_id)
    assert _waiting(api, job_id)[0] == "domain_rate"
    # time is the subject: the job's not_before (its domain token) comes due
    time.sleep(max(0.0, (Job.objects.get(id=job_id).not_before - timezone.now()).total_seconds()) + 0.1)
    _published(job_id)
    _run(job_id)
    job = Job.objects.get(id=job_id)
    assert (job.status, job.attempts) == ("queued", 1)
    reason, until = _waiting(api, job_id)
    assert reason == "retry_backoff" and until == job.not_before


def test_a_deferred_job_whose_time_has_come_waits_for_its_tenants_turn(api, target):
    _policy(requests_per_second=2, burst=1)
    first, job_id = _submit(api, target.url("/bytes/10")), _submit(api, target.url("/bytes/10"))
    _published(first)
    _run(first)
    _run(job_id)
    assert _waiting(api, job_id)[0] == "domain_rate"
    # time is the subject: the job's not_before (its domain token) comes due
    time.sleep(max(0.0, (Job.objects.get(id=job_id).not_before - timezone.now()).total_seconds()) + 0.1)
    assert _waiting(api, job_id) == ("tenant_share", None)


def test_a_running_or_finished_job_waits_for_nothing(api, target):
    job_id = _submit(api, target.url("/bytes/10"))
    _published(job_id)
    _run(job_id)
    assert api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "succeeded"
    assert _waiting(api, job_id) == (None, None)
    Job.objects.filter(id=job_id).update(status="running")
    assert _waiting(api, job_id) == (None, None)


def test_the_list_tells_each_jobs_wait_without_a_query_per_job(api, target):
    _submit(api, target.url("/bytes/10"))
    with CaptureQueriesContext(connection) as one:
        assert api.get("/api/v1/jobs").json()["items"][0]["waiting_for"] == "tenant_share"
    for _ in range(19):
        _submit(api, target.url("/bytes/10"))
    with CaptureQueriesContext(connection) as twenty:
        items = api.get("/api/v1/jobs").json()["items"]
    assert [item["waiting_for"] for item in items] == ["tenant_share"] * 20
    assert len(twenty) == len(one)


def test_the_admins_job_page_shows_the_same_wait(api, target, admin_client):
    _policy(requests_per_second=0.2, burst=1)
    first, second = _submit(api, target.url("/bytes/10")), _submit(api, target.url("/bytes/10"))
    _published(first)
    _run(first)
    _run(second)
    html = admin_client.get(f"/admin/jobs/job/{second}/change/").content.decode()
    assert f"domain_rate until {_not_before(second).isoformat()}" in html
    html = admin_client.get(f"/admin/jobs/job/{first}/change/").content.decode()
    assert "waiting for" in html.lower() and "domain_rate" not in html
