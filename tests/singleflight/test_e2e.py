"""Single-flight fetch through the whole service (item 1 and its "done when"): jobs in
through the HTTP API, real control, beat and worker processes, a local target that counts the
requests it receives, rows and stored bodies out."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection

from apps.jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from apps.jobs.sweeping import LEASE_EXPIRED
from apps.tenants.models import Tenant
from tests.e2e.fault_support import (
    FAST,
    attempt_history,
    fast_env,
    sha256,
    stored_body,
    submit,
    wait_all_final,
)
from tests.support.procs import wait_for
from tests.support.target import body_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _submit_concurrently(api: Any, url: str, n: int, **fields: Any) -> list[str]:
    """``n`` POST /jobs at once, from 10 threads (each with its own database connection)."""

    def one(_: int) -> str:
        try:
            response = api.post("/api/v1/jobs", {"url": url, **fields}, format="json")
            assert response.status_code == 202, response.content
            return str(response.json()["id"])
        finally:
            connection.close()

    with ThreadPoolExecutor(10) as pool:
        return list(pool.map(one, range(n)))


def _outcomes(ids: list[str]) -> set[tuple[str, str | None]]:
    return set(Job.objects.filter(id__in=ids).values_list("status", "result_sha256"))


def test_fifty_identical_jobs_cause_one_request_fifty_more_none_and_max_age_zero_always_fetches(
    services, make_tenant, target
):
    # The default results directory: this test process's API serves the results links.
    services(**FAST).start_all(worker_concurrency=20)
    _, _, api = make_tenant()
    url = target.url("/bytes/20000?delay=2")
    digest = sha256(body_for(20000))

    first = _submit_concurrently(api, url, 50, max_age_s=60)
    wait_all_final(first, timeout=60)
    assert _outcomes(first) == {(JobStatus.SUCCEEDED, digest)}
    assert len(target.requests_for("/bytes/20000")) == 1
    # One job fetched; the 49 others each have one attempt of their own, served from its fetch.
    fetched = Attempt.objects.get(job_id__in=first, served_from_job__isnull=True)
    served = Attempt.objects.filter(job_id__in=first, served_from_job=fetched.job_id, served_from_attempt=1)
    assert served.count() == 49 and {a.outcome for a in served} == {AttemptOutcome.SUCCEEDED}
    shown = api.get(f"/api/v1/jobs/{served[0].job_id}/attempts").json()["items"]
    assert shown[0]["served_from"] == {"job_id": str(fetched.job_id), "attempt": 1, "other_tenant": False}
    # Each job has its own signed link to the same stored body.
    meta = api.get(f"/api/v1/jobs/{served[0].job_id}/result").json()
    assert (meta["sha256"], meta["size"]) == (digest, 20000)

    more = _submit_concurrently(api, url, 50, max_age_s=60)
    wait_all_final(more, timeout=60)
    assert _outcomes(more) == {(JobStatus.SUCCEEDED, digest)}
    assert len(target.requests_for("/bytes/20000")) == 1

    fresh = _submit_concurrently(api, url, 10, max_age_s=0)
    wait_all_final(fresh, timeout=60)
    assert _outcomes(fresh) == {(JobStatus.SUCCEEDED, digest)}
    assert len(target.requests_for("/bytes/20000")) == 11


def test_a_waiter_takes_over_when_the_elected_fetchs_worker_is_killed(
    services, make_tenant, target, tmp_path
):
    svc = services(**fast_env(tmp_path))
    svc.start("control")
    svc.start("beat")
    first = svc.start("worker", concurrency=4, name="first")
    tenant, _, _ = make_tenant()
    url = target.url("/drip?n=8&delay=0.5")  # 4 s of download
    elected = submit(tenant, url, max_age_s=60)
    wait_for(
        lambda: target.requests_for("/drip") and Job.objects.filter(id=elected.id, status="running").exists(),
        timeout=30,
        what="the elected download to start",
    )
    waiters = [submit(tenant, url, max_age_s=60).id for _ in range(5)]
    wait_for(
        lambda: Job.objects.filter(id__in=waiters, fetch_parked_at__isnull=False).count() == 5,
        timeout=20,
        what="the waiters to park",
    )
    first.kill()
    svc.start("worker", concurrency=4, name="second")
    every = [elected.id, *waiters]
    wait_all_final(every, timeout=60)

    assert _outcomes(every) == {(JobStatus.SUCCEEDED, sha256(b"x" * 8))}
    assert len(target.requests_for("/drip")) == 2
    elected.refresh_from_db()
    assert attempt_history(elected)[0] == (1, AttemptOutcome.LOST, LEASE_EXPIRED)
    assert stored_body(tmp_path, elected) == b"x" * 8
    # Exactly one attempt fetched after the kill; every other job was served from it.
    fetched = Attempt.objects.filter(job_id__in=every, outcome="succeeded", served_from_job__isnull=True)
    assert fetched.count() == 1
    assert (
        Attempt.objects.filter(
            job_id__in=every, outcome="succeeded", served_from_job=fetched[0].job_id
        ).count()
        == 5
    )


def test_a_permanent_failure_fails_every_waiter_each_with_its_own_attempt(
    services, make_tenant, target, tmp_path
):
    services(**fast_env(tmp_path)).start_all(worker_concurrency=20)
    _, _, api = make_tenant()
    ids = _submit_concurrently(api, target.url("/status/404?delay=3"), 10, max_age_s=60, max_attempts=3)
    wait_all_final(ids, timeout=60)

    assert len(target.requests_for("/status/404")) == 1
    for job in Job.objects.filter(id__in=ids):
        assert (job.status, job.attempts, job.last_error["class"]) == (JobStatus.FAILED, 1, "http_404")
        assert attempt_history(job) == [(1, AttemptOutcome.PERMANENT, "http_404")]
    assert Attempt.objects.filter(job_id__in=ids, served_from_job__isnull=False).count() == 9


def test_tenants_share_a_fetch_only_when_an_operator_let_both_share(services, make_tenant, target):
    services(**FAST).start_all(worker_concurrency=20)
    (a, _, api_a), (b, _, api_b), (_c, _, api_c), (_d, _, api_d) = (make_tenant() for _ in range(4))
    Tenant.objects.filter(id__in=[a.id, b.id]).update(share_fetches=True)
    url = target.url("/bytes/300")

    def run(api: Any) -> str:
        job_id = _submit_concurrently(api, url, 1, max_age_s=600)[0]
        wait_all_final([job_id], timeout=30)
        return job_id

    job_a, job_b, job_c, job_d = (run(api) for api in (api_a, api_b, api_c, api_d))
    # a fetched, b was served a's fetch; c and d share with nobody (the default): one fetch each.
    assert len(target.requests_for("/bytes/300")) == 3
    # b learns its job was served by another tenant's fetch, not which job that was.
    assert api_b.get(f"/api/v1/jobs/{job_b}/attempts").json()["items"][0]["served_from"] == {
        "job_id": None,
        "attempt": None,
        "other_tenant": True,
    }
    assert Attempt.objects.get(job_id=job_b).served_from_job == uuid.UUID(job_a)  # the operator's record
    for api, job_id in ((api_c, job_c), (api_d, job_d)):
        assert api.get(f"/api/v1/jobs/{job_id}/attempts").json()["items"][0]["served_from"] is None
    # Sharing a fetch shares no job: b still cannot read a's.
    assert api_b.get(f"/api/v1/jobs/{job_a}").status_code == 404
    assert api_b.get(f"/api/v1/jobs/{job_b}/result").json()["sha256"] == sha256(body_for(300))
    assert Job.objects.get(id=job_b).tenant_id == b.id
