"""The stuck-sweeper against the real database (NFR-3, NFR-4; NFR-4)."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, connections
from django.utils import timezone

from apps.jobs.cancel_requeue import job_cancel
from apps.jobs.claims import job_claim, jobs_renew_leases
from apps.jobs.final_notices import JOB_FINAL_CHANNEL
from apps.jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.jobs.receipts import AttemptFinished
from apps.jobs.sweeping import LEASE_EXPIRED, jobs_release_held, jobs_sweep_unclaimed
from apps.scheduling.services import jobs_sweep_expired_leases, jobs_sweep_stuck
from tests.scheduling.factories import queued_job, running_job


@pytest.mark.django_db
def test_a_job_whose_lease_expired_goes_back_to_the_queue_with_its_attempt_recorded_as_lost(make_tenant):
    """NFR-4: a job of a dead worker does not stay running."""
    tenant, _, _ = make_tenant()
    job = running_job(tenant, max_attempts=3)
    Job.objects.filter(id=job.id).update(published_at=timezone.now())

    stats = jobs_sweep_expired_leases()

    job.refresh_from_db()
    assert stats.requeued == 1 and stats.failed == 0
    assert job.status == JobStatus.QUEUED
    assert job.published_at is None  # the publisher sends it again
    assert job.lease_owner is None and job.lease_expires_at is None
    assert job.not_before is not None  # waits out a backoff in the database
    assert job.last_error == {
        "class": LEASE_EXPIRED,
        "message": job.last_error["message"],
        "http_status": None,
    }
    attempt = Attempt.objects.get(job=job, number=1)
    assert attempt.outcome == AttemptOutcome.LOST
    assert attempt.error_class == LEASE_EXPIRED
    assert attempt.finished_at is not None


@pytest.mark.django_db
def test_a_lease_that_has_not_expired_is_left_alone(make_tenant):
    tenant, _, _ = make_tenant()
    job = running_job(tenant, lease_left_s=30)

    assert jobs_sweep_expired_leases().lost == 0

    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    assert Attempt.objects.get(job=job).finished_at is None


@pytest.mark.django_db
def test_a_lost_last_attempt_fails_the_job_and_announces_it(make_tenant):
    tenant, _, _ = make_tenant()
    job = running_job(tenant, max_attempts=1)

    stats = jobs_sweep_expired_leases()

    job.refresh_from_db()
    assert stats.failed == 1 and stats.final_ids == [str(job.id)]
    assert job.status == JobStatus.FAILED
    assert job.finished_at is not None
    assert job.final_published_at is None  # the end-of-job outbox picks it up (webhooks)
    assert job.attempts == job.max_attempts == 1


@pytest.mark.django_db
def test_a_running_job_with_a_cancel_request_is_cancelled_when_its_lease_expires(make_tenant):
    tenant, _, _ = make_tenant()
    job = running_job(tenant, lease_left_s=30)
    assert job_cancel(job_id=job.id) == "cancel_requested"
    Job.objects.filter(id=job.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    assert jobs_sweep_expired_leases().cancelled == 1

    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


@pytest.mark.django_db
def test_a_worker_that_comes_back_after_the_sweep_can_neither_renew_nor_record(make_tenant):
    """The attempt number fences the late worker: its renewal is refused and its receipt is stale."""
    tenant, _, _ = make_tenant()
    job = running_job(tenant, worker="w1@h:1:1")
    jobs_sweep_expired_leases()

    assert jobs_renew_leases(leases=[(job.id, 1, "w1@h:1:1")]) == set()
    late = AttemptFinished(job_id=str(job.id), attempt=1, outcome="succeeded", finished_at=2e9, duration_ms=1)
    assert attempts_apply_finished([late]).stale == 1
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert Attempt.objects.get(job=job, number=1).outcome == AttemptOutcome.LOST


@pytest.mark.django_db
def test_a_swept_job_is_claimed_again_as_its_next_attempt(make_tenant):
    tenant, _, _ = make_tenant()
    job = running_job(tenant)
    jobs_sweep_expired_leases()
    Job.objects.filter(id=job.id).update(not_before=None)

    claimed = job_claim(job_id=job.id, worker="w2@h:1:1")

    assert claimed is not None and claimed.attempt == 2
    assert list(Attempt.objects.filter(job=job).values_list("number", "outcome")) == [
        (1, AttemptOutcome.LOST),
        (2, None),
    ]


@pytest.mark.django_db
def test_a_job_published_long_ago_and_never_taken_is_published_again(make_tenant, settings):
    """A broker that lost its messages loses no job (NFR-4)."""
    settings.SCRAPEJOBS_REPUBLISH_AFTER_S = 60
    tenant, _, _ = make_tenant()
    old = queued_job(tenant)
    recent = queued_job(tenant)
    taken = running_job(tenant, lease_left_s=30)
    now = timezone.now()
    Job.objects.filter(id=old.id).update(published_at=now - timedelta(seconds=61))
    Job.objects.filter(id=recent.id).update(published_at=now - timedelta(seconds=5))
    Job.objects.filter(id=taken.id).update(published_at=now - timedelta(seconds=600))

    assert jobs_sweep_unclaimed() == 1

    assert Job.objects.get(id=old.id).published_at is None
    assert Job.objects.get(id=recent.id).published_at is not None
    assert Job.objects.get(id=taken.id).published_at is not None


@pytest.mark.django_db
def test_the_unclaimed_sweep_works_through_more_than_one_batch(make_tenant):
    tenant, _, _ = make_tenant()
    jobs = [queued_job(tenant) for _ in range(7)]
    Job.objects.filter(id__in=[j.id for j in jobs]).update(published_at=timezone.now() - timedelta(hours=1))

    assert jobs_sweep_unclaimed(batch_size=3) == 7
    assert not Job.objects.filter(published_at__isnull=False).exists()


@pytest.mark.django_db
def test_a_stopping_worker_gives_back_only_the_jobs_it_still_holds(make_tenant):
    tenant, _, _ = make_tenant()
    mine = running_job(tenant, worker="worker-1@box:10:1", lease_left_s=30)
    taken_over = running_job(tenant, worker="worker-2@box:11:1", lease_left_s=30)

    stats = jobs_release_held(job_ids=[mine.id, taken_over.id], lease_owner_prefix="worker-1@box")

    assert stats.requeued == 1
    assert Job.objects.get(id=mine.id).status == JobStatus.QUEUED
    assert Attempt.objects.get(job=mine).error_class == "worker_stopped"
    assert Job.objects.get(id=taken_over.id).status == JobStatus.RUNNING


@pytest.mark.django_db(transaction=True)
def test_jobs_the_sweeper_makes_final_are_notified_on_the_final_channel(make_tenant):
    tenant, _, _ = make_tenant()
    job = running_job(tenant, max_attempts=1)
    s = connection.settings_dict
    dsn = f"host={s['HOST'] or '127.0.0.1'} port={s['PORT'] or 5432} user={s['USER']} dbname={s['NAME']}"
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {JOB_FINAL_CHANNEL}")
        jobs_sweep_stuck()
        payloads = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert payloads == [str(job.id)]


@pytest.mark.django_db(transaction=True)
def test_two_sweepers_at_once_lose_each_attempt_exactly_once(make_tenant):
    """SKIP LOCKED splits the rows; nothing is swept twice and nothing is missed."""
    tenant, _, _ = make_tenant()
    jobs = [running_job(tenant, max_attempts=3) for _ in range(120)]
    results = []
    barrier = threading.Barrier(3)

    def sweep() -> None:
        try:
            barrier.wait()
            results.append(jobs_sweep_expired_leases(batch_size=10).requeued)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sweep) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sum(results) == len(jobs)
    assert Job.objects.filter(status=JobStatus.QUEUED).count() == len(jobs)
    assert Attempt.objects.filter(outcome=AttemptOutcome.LOST).count() == len(jobs)
    assert Attempt.objects.count() == len(jobs)


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_receipt_the_writer_is_folding_is_left_to_the_writer(make_tenant):
    """The writer locks the attempt row, then the job row; the sweeper skips such a job instead
    of deadlocking with the writer or overruling the receipt's outcome."""
    tenant, _, _ = make_tenant()
    job = running_job(tenant)
    s = connection.settings_dict
    dsn = f"host={s['HOST'] or '127.0.0.1'} port={s['PORT'] or 5432} user={s['USER']} dbname={s['NAME']}"
    with psycopg.connect(dsn) as writer:
        writer.execute("SELECT 1 FROM jobs_attempt WHERE job_id = %s FOR UPDATE", [job.id])
        assert jobs_sweep_expired_leases().lost == 0
        writer.rollback()
    assert jobs_sweep_expired_leases().requeued == 1
