"""A deferred attempt (NFR-24: a redirect hop's domain had no turn for it) is recorded and not
counted: ``max_attempts`` stays what the caller asked for, and only the other attempts spend it,
in the claim, the fold, the sweeper and a requeue alike (docs/design/politeness.md)."""

from __future__ import annotations

import time

import pytest

from apps.jobs.cancel_requeue import jobs_requeue
from apps.jobs.claims import job_claim
from apps.jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.jobs.receipts import AttemptFinished
from apps.scheduling.services import jobs_sweep_expired_leases
from tests.scheduling.factories import queued_job

pytestmark = pytest.mark.django_db


def _claim(job: Job) -> int:
    Job.objects.filter(id=job.id).update(not_before=None)
    claimed = job_claim(job_id=job.id, worker="w1@host:1:1")
    assert claimed is not None
    return claimed.attempt


def _end(job: Job, attempt: int, outcome: str, error_class: str | None = None) -> Job:
    receipt = AttemptFinished(
        job_id=str(job.id),
        attempt=attempt,
        outcome=outcome,
        finished_at=time.time(),
        duration_ms=5,
        error_class=error_class,
        retry_after_s=0.0 if outcome == AttemptOutcome.DEFERRED else None,
    )
    assert attempts_apply_finished([receipt]).applied == 1
    return Job.objects.get(id=job.id)


def _defer(job: Job, times: int) -> Job:
    for _ in range(times):
        job = _end(job, _claim(job), AttemptOutcome.DEFERRED, "redirect_deferred")
    return job


def test_a_job_of_one_attempt_deferred_three_times_still_has_its_attempt(make_tenant):
    job = _defer(queued_job(make_tenant()[0], max_attempts=1), 3)
    assert job.max_attempts == 1
    assert (job.status, job.attempts, job.deferred_attempts, job.max_attempts) == (JobStatus.QUEUED, 3, 3, 1)

    job = _end(job, _claim(job), AttemptOutcome.TEMPORARY, "http_503")

    # The one counted attempt was the last: failed, not retried, and max_attempts never moved.
    assert (job.status, job.attempts, job.deferred_attempts, job.max_attempts) == (JobStatus.FAILED, 4, 3, 1)
    assert list(Attempt.objects.filter(job=job).order_by("number").values_list("outcome", flat=True)) == [
        "deferred",
        "deferred",
        "deferred",
        "failed_temporary",
    ]
    assert job_claim(job_id=job.id, worker="w1@host:1:1") is None


def test_a_lost_attempt_after_deferrals_is_the_last_only_when_it_spends_the_budget(make_tenant):
    tenant = make_tenant()[0]
    job = _defer(queued_job(tenant, max_attempts=2), 2)
    _claim(job)  # the first counted attempt; its worker dies
    Job.objects.filter(id=job.id).update(lease_expires_at="2000-01-01T00:00:00Z")
    jobs_sweep_expired_leases()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.deferred_attempts, job.max_attempts) == (JobStatus.QUEUED, 3, 2, 2)

    _claim(job)  # the second and last counted attempt; lost too
    Job.objects.filter(id=job.id).update(lease_expires_at="2000-01-01T00:00:00Z")
    jobs_sweep_expired_leases()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.deferred_attempts, job.max_attempts) == (JobStatus.FAILED, 4, 2, 2)


def test_a_requeue_after_deferrals_gives_the_full_budget_again(make_tenant):
    job = _defer(queued_job(make_tenant()[0], max_attempts=2), 2)
    for _ in range(2):
        job = _end(job, _claim(job), AttemptOutcome.TEMPORARY, "http_503")
    assert (job.status, job.attempts, job.deferred_attempts) == (JobStatus.FAILED, 4, 2)

    assert jobs_requeue(job_ids=[job.id]) == 1
    job.refresh_from_db()
    # Two counted attempts made, two more allowed: max_attempts is counted attempts + budget.
    assert (job.status, job.max_attempts) == (JobStatus.QUEUED, 4)
    for _ in range(2):
        job = _end(job, _claim(job), AttemptOutcome.TEMPORARY, "http_503")
    assert (job.status, job.attempts, job.deferred_attempts, job.max_attempts) == (JobStatus.FAILED, 6, 2, 4)
