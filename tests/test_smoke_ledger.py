"""The ledger's core services against the real database (FR-1, FR-3)."""

import pytest

from apps.jobs.cancel_requeue import job_cancel
from apps.jobs.claims import job_claim
from apps.jobs.models import Attempt, Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.jobs.receipts import AttemptFinished
from tests.support.factories import job_make

pytestmark = pytest.mark.django_db


def test_a_duplicate_claim_is_a_no_op(make_tenant):
    tenant, _, _ = make_tenant()
    job = job_make(tenant)
    first = job_claim(job_id=job.id, worker="w1")
    assert first is not None and first.attempt == 1
    assert job_claim(job_id=job.id, worker="w2") is None
    assert Attempt.objects.filter(job=job).count() == 1


def test_a_stale_attempt_receipt_cannot_move_a_finished_job(make_tenant):
    tenant, _, _ = make_tenant()
    job = job_make(tenant)
    job_claim(job_id=job.id, worker="w1")
    ok = AttemptFinished(job_id=str(job.id), attempt=1, outcome="succeeded", finished_at=1e9, duration_ms=5)
    assert attempts_apply_finished([ok]).applied == 1
    late = AttemptFinished(
        job_id=str(job.id), attempt=1, outcome="failed_permanent", finished_at=1e9 + 1, duration_ms=5
    )
    assert attempts_apply_finished([late]).stale == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert Attempt.objects.get(job=job, number=1).outcome == "succeeded"


def test_cancelling_a_queued_job_is_final_at_once(make_tenant):
    tenant, _, _ = make_tenant()
    job = job_make(tenant)
    assert job_cancel(job_id=job.id) == "cancelled"
    assert Job.objects.get(id=job.id).status == JobStatus.CANCELLED
    assert job_claim(job_id=job.id, worker="w1") is None
    assert job_cancel(job_id=job.id) == "final"
