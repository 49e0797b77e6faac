"""A deferred attempt (NFR-24: a redirect hop's domain had no turn for it) is recorded and not
counted: ``max_attempts`` stays what the caller asked for, and only the other attempts spend it,
in the claim, the fold, the sweeper and a requeue alike (docs/design/politeness.md)."""

from __future__ import annotations

import time

import pytest

from apps.jobs.cancel_requeue import jobs_requeue
from apps.jobs.claims import ClaimedJob, job_claim
from apps.jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.jobs.receipts import AttemptFinished, receipt_decode, receipt_encode
from apps.scheduling.services import jobs_sweep_expired_leases
from tests.scheduling.factories import queued_job

pytestmark = pytest.mark.django_db


def _claim(job: Job) -> ClaimedJob:
    Job.objects.filter(id=job.id).update(not_before=None)
    claimed = job_claim(job_id=job.id, worker="w1@host:1:1")
    assert claimed is not None
    return claimed


def _end(job: Job, claimed: ClaimedJob, outcome: str, error_class: str | None = None) -> Job:
    """The attempt's receipt as the worker writes it (apps.scraping.attempt): with the deferrals
    its claim read, through the wire format."""
    receipt = AttemptFinished(
        job_id=str(job.id),
        attempt=claimed.attempt,
        outcome=outcome,
        finished_at=time.time(),
        duration_ms=5,
        error_class=error_class,
        retry_after_s=0.0 if outcome == AttemptOutcome.DEFERRED else None,
        deferred_before=claimed.deferred_attempts,
    )
    assert attempts_apply_finished([receipt_decode(receipt_encode(receipt))]).applied == 1
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


def _retry_delays_s(jobs: list[Job]) -> list[float]:
    rows = Job.objects.filter(id__in=[j.id for j in jobs], status=JobStatus.QUEUED)
    pairs = rows.values_list("not_before", "updated_at")
    return [(not_before - updated).total_seconds() for not_before, updated in pairs if not_before is not None]


def test_the_backoff_after_deferrals_is_the_counted_attempts_in_the_fold_and_the_sweeper_alike(
    make_tenant, settings
):
    """One rule, one count: a job's first counted failure after three deferrals waits the first
    backoff (at most SCRAPEJOBS_RETRY_BASE_S), not the fourth (eight times that), whether the
    fold plans it from a receipt or the sweeper from a lost attempt (NFR-24). Full jitter: twenty
    jobs, all within the first backoff's ceiling (each one eighth likely under the fourth's)."""
    settings.SCRAPEJOBS_RETRY_BASE_S = 100.0
    settings.SCRAPEJOBS_RETRY_CAP_S = 100_000.0
    tenant = make_tenant()[0]
    failed = [_defer(queued_job(tenant, max_attempts=5), 3) for _ in range(20)]
    failed = [_end(job, _claim(job), AttemptOutcome.TEMPORARY, "http_503") for job in failed]
    lost = [_defer(queued_job(tenant, max_attempts=5), 3) for _ in range(20)]
    for job in lost:
        _claim(job)
    Job.objects.filter(id__in=[j.id for j in lost]).update(lease_expires_at="2000-01-01T00:00:00Z")
    jobs_sweep_expired_leases()
    for name, jobs in (("fold", failed), ("sweeper", lost)):
        delays = _retry_delays_s(jobs)
        assert len(delays) == 20, name
        # time is the subject: a backoff's length: within the first backoff's
        # 100 s ceiling, where the fourth's is 800 s
        assert max(delays) <= 100.0 + 1, (name, sorted(delays))
