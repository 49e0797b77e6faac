"""A job with ``max_age_s`` 0 is claimed without the single-flight decision's read (FR-15,
NFR-15): it takes no stored result and waits for no other fetch, so its worker claims it at once,
computes its fetch key from what the claim returns and hands the key to the fold with the stored
body. Contract §6 still holds: a later job with ``max_age_s`` > 0 is served that body.

Through the real path: jobs in over HTTP, the publisher's broker message as written, the scrape
task run on it in this process, the writer's fold from the receipt stream, rows and a local
target's request log out."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis
from django.conf import settings

from apps.jobs import fetch_keys, singleflight
from apps.jobs.models import Attempt, Job, JobStatus
from apps.publishing.publisher import outbox_publish
from apps.scraping.tasks import scrape_job
from apps.tenants.models import Tenant
from apps.writer.flush import writer_flush_once

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def decisions_read(monkeypatch) -> list[Any]:
    """Every single-flight read of a job's row (``_decidable_job``), by job id."""
    seen: list[Any] = []
    real = singleflight._decidable_job

    def counted(job_id):
        seen.append(str(job_id))
        return real(job_id)

    monkeypatch.setattr(singleflight, "_decidable_job", counted)
    return seen


def _post(api, url: str, **fields) -> Job:
    r = api.post("/api/v1/jobs", {"url": url, **fields}, format="json")
    assert r.status_code == 202, r.content
    return Job.objects.get(id=r.json()["id"])


def _message_of(job: Job, *, take: bool = True) -> dict[str, Any]:
    """Publish, and the job's scrape message's keyword arguments, taken off the broker unless
    ``take`` is false."""
    outbox_publish(batch_size=100, budget_s=5)
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL, decode_responses=True)
    for queue in ("jobs.high", "jobs.normal", "jobs.low"):
        for raw in broker.lrange(queue, 0, -1):
            args, kwargs, _embed = json.loads(base64.b64decode(json.loads(raw)["body"]))
            if args[0] == str(job.id):
                if take:
                    broker.lrem(queue, 1, str(raw))
                return kwargs
    raise AssertionError(f"no message for {job.id}")


def _deliver(job: Job, *, drop: tuple[str, ...] = ()) -> Job:
    """Run the scrape task on the job's message (without the arguments in ``drop``, as an older
    publisher wrote it), then the writer's fold of its receipt."""
    kwargs = {k: v for k, v in _message_of(job).items() if k not in drop}
    result = scrape_job.apply(args=(str(job.id),), kwargs=kwargs)
    assert result.successful(), result.traceback
    writer_flush_once()
    job.refresh_from_db()
    return job


def _expected_key(job: Job) -> str:
    tenant = Tenant.objects.get(id=job.tenant_id)
    return fetch_keys.job_fetch_key(
        method=job.method,
        url=job.url,
        headers=job.headers,
        body=job.body,
        render=job.render,
        browser_options=job.browser_options,
        tenant_id=job.tenant_id,
        share_fetches=tenant.share_fetches,
        obey_robots=tenant.obey_robots,
    )


def test_a_job_taking_no_stored_result_is_claimed_unread_and_its_body_still_serves_later_jobs(
    make_tenant, target, decisions_read
):
    _, _, api = make_tenant()
    url = target.url("/bytes/48")
    fresh = _post(api, url)  # max_age_s 0, the default
    assert _message_of(fresh, take=False)["max_age_s"] == 0
    fresh = _deliver(fresh)
    assert decisions_read == []  # claimed without the decision's read
    assert fresh.status == JobStatus.SUCCEEDED and fresh.result_key
    # The key is the one a decision would have computed, stored with the success.
    assert fresh.fetch_key == _expected_key(fresh)

    later = _deliver(_post(api, url, max_age_s=600))
    assert decisions_read == [str(later.id)]  # it may be served: decided
    assert (later.status, later.result_sha256) == (JobStatus.SUCCEEDED, fresh.result_sha256)
    assert Attempt.objects.get(job=later).served_from_job == fresh.id
    assert len(target.requests_for("/bytes/48")) == 1


def test_an_older_publishers_message_without_max_age_is_decided_as_before(
    make_tenant, target, decisions_read
):
    _, _, api = make_tenant()
    job = _deliver(_post(api, target.url("/bytes/8")), drop=("max_age_s",))
    assert decisions_read == [str(job.id)]
    assert job.status == JobStatus.SUCCEEDED and job.fetch_key == _expected_key(job)


def test_a_failed_undecided_fetch_stores_no_key_and_serves_nothing(make_tenant, target):
    _, _, api = make_tenant()
    url = target.url("/status/404")
    failed = _deliver(_post(api, url, max_attempts=1))
    assert failed.status == JobStatus.FAILED and failed.fetch_key is None
    later = _deliver(_post(api, url, max_age_s=600, max_attempts=1))
    assert later.status == JobStatus.FAILED
    assert Attempt.objects.get(job=later).served_from_job is None
    assert len(target.requests_for("/status/404")) == 2


def test_the_key_of_an_undecided_fetch_is_scoped_by_the_tenant_switches_read_with_the_claim(
    make_tenant, target
):
    # A tenant that shares fetches and ignores robots.txt: its body is served to another such
    # tenant, and the switches are the ones the claim read (changed after intake, before the claim).
    first_tenant, _, api_first = make_tenant()
    other_tenant, _, api_other = make_tenant()
    url = target.url("/bytes/24")
    fresh = _post(api_first, url)
    Tenant.objects.filter(id__in=[first_tenant.id, other_tenant.id]).update(
        share_fetches=True, obey_robots=False
    )
    fresh = _deliver(fresh)
    assert fresh.fetch_key == _expected_key(fresh)
    served = _deliver(_post(api_other, url, max_age_s=600))
    assert Attempt.objects.get(job=served).served_from_job == fresh.id
    # A tenant that does not share is not served it.
    own, _, api_own = make_tenant()
    fetched = _deliver(_post(api_own, url, max_age_s=600))
    assert fetched.status == JobStatus.SUCCEEDED
    assert Attempt.objects.get(job=fetched).served_from_job is None
    assert len(target.requests_for("/bytes/24")) == 2
