"""Single-flight against a careless or hostile stream of identical jobs (FR-15): a served copy is
aged by the real fetch, the tenant's robots.txt switch is part of the key, and a parked job gets
no broker message. Jobs in through the HTTP API, the worker's own attempt function and the
writer's fold in this process, a real local target counting its requests, rows out."""

from __future__ import annotations

import base64
import json
import time
from datetime import timedelta

import pytest
import redis
from django.conf import settings

from apps.jobs.models import Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.jobs.singleflight import job_fetch_decide
from apps.publishing.publisher import outbox_publish
from apps.scheduling.services import jobs_sweep_stuck
from apps.scraping.attempt import job_run_attempt
from apps.tenants.models import Tenant
from tests.politeness.test_robots import obeying  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db(transaction=True)


def _post(api, url: str, **fields) -> Job:
    r = api.post("/api/v1/jobs", {"url": url, **fields}, format="json")
    assert r.status_code == 202, r.content
    return Job.objects.get(id=r.json()["id"])


def _run(job: Job) -> Job:
    """What a worker does with the job's message, then the writer's fold of its receipt."""
    receipt = job_run_attempt(job_id=job.id, worker="w:1:1")
    if receipt is not None:
        assert attempts_apply_finished([receipt]).applied == 1
    job.refresh_from_db()
    return job


def test_a_chain_of_served_copies_never_makes_an_old_body_young(make_tenant, target):
    _, _, api = make_tenant()
    url = target.url("/bytes/64")
    max_age_s = 2
    jobs = []
    # One identical job every 0.7 s for 5 s: each arrives well within max_age_s of the one before,
    # so aging by the served copy's own end would serve the first fetch for ever.
    for _ in range(8):
        job = _run(_post(api, url, max_age_s=max_age_s))
        assert job.status == JobStatus.SUCCEEDED, job.last_error
        jobs.append(job)
        # time is the subject: one identical job every 0.7 s, against a max_age_s of 2
        time.sleep(0.7)
    fetched = len(target.requests_for("/bytes/64"))
    assert fetched >= 2, "the URL was never fetched again"
    assert fetched < len(jobs)  # and the young copies were still shared
    for job in jobs:
        # Every job's body was really fetched within its max_age_s of the moment it was served.
        assert job.finished_at - job.result_stored_at <= timedelta(seconds=max_age_s), job.id


def test_a_body_fetched_ignoring_robots_txt_is_not_served_to_a_tenant_that_obeys_it(
    obeying,  # noqa: F811
    make_tenant,
    target,
):
    target.robots = (200, "User-agent: *\nDisallow: /bytes/\n")
    ignoring, _, api_ignoring = make_tenant()
    obeying_tenant, _, api_obeying = make_tenant()
    Tenant.objects.filter(id=ignoring.id).update(share_fetches=True, obey_robots=False)
    Tenant.objects.filter(id=obeying_tenant.id).update(share_fetches=True)
    url = target.url("/bytes/32")

    first = _run(_post(api_ignoring, url, max_age_s=600))
    assert first.status == JobStatus.SUCCEEDED
    second = _run(_post(api_obeying, url, max_age_s=600))
    assert (second.status, (second.last_error or {}).get("class")) == (JobStatus.FAILED, "robots_disallowed")
    assert second.result_key is None
    # The two sharing tenants that ignore robots.txt still share.
    other_ignoring, _, api_other = make_tenant()
    Tenant.objects.filter(id=other_ignoring.id).update(share_fetches=True, obey_robots=False)
    third = _run(_post(api_other, url, max_age_s=600))
    assert (third.status, third.result_sha256) == (JobStatus.SUCCEEDED, first.result_sha256)
    assert len(target.requests_for("/bytes/32")) == 1


def _messages_for(job_id: object) -> int:
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    n = 0
    for queue in ("jobs.high", "jobs.normal", "jobs.low"):
        for raw in broker.lrange(queue, 0, -1):
            message = json.loads(raw)
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            n += args[0] == str(job_id)
    return n


def test_a_parked_job_is_not_republished_while_its_fetch_is_alive(settings, make_tenant, target):
    settings.SCRAPEJOBS_REPUBLISH_AFTER_S = 1
    _, _, api = make_tenant()
    url = target.url("/bytes/16")
    elected, parked = _post(api, url, max_age_s=60), _post(api, url, max_age_s=60)
    outbox_publish(batch_size=100, budget_s=5)
    assert job_fetch_decide(job_id=elected.id).kind == "fetch"  # elected; its worker is slow to claim
    assert job_fetch_decide(job_id=parked.id).kind == "parked"
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()

    for _ in range(3):  # three sweeper ticks past the republish bound, each followed by a publish
        # time is the subject: each tick comes past the 1 s republish bound
        time.sleep(1.2)
        jobs_sweep_stuck()
        outbox_publish(batch_size=100, budget_s=5)
    assert _messages_for(parked.id) == 0
    assert _messages_for(elected.id) >= 1  # the elected job's lost message is sent again
    parked.refresh_from_db()
    assert parked.status == JobStatus.QUEUED and parked.fetch_parked_at is not None

    # A parked job whose key has no live fetch any more (nothing should leave one) is sent again.
    Job.objects.filter(id=elected.id).update(status=JobStatus.CANCELLED)
    # time is the subject: the 1 s republish bound passes
    time.sleep(1.2)
    jobs_sweep_stuck()
    outbox_publish(batch_size=100, budget_s=5)
    assert _messages_for(parked.id) == 1
    parked.refresh_from_db()
    assert parked.fetch_parked_at is None
