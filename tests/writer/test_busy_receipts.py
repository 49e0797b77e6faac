"""FR-W4 against a row locked for good: a receipt that always fails as busy counts toward
MAX_ATTEMPTS and ends as a dead receipt, and a receipt that has waited too long no longer holds
back the sweep of other jobs' expired leases. Real PostgreSQL (a second connection holds the
lock), real Redis, the writer's flush and the sweeper's tick as beat runs them."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from apps.jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from apps.scheduling.services import jobs_sweep_stuck
from apps.writer.flush import writer_flush_once
from apps.writer.selectors import dead_receipts_list
from apps.writer.streams import FIELD, STREAM, TRIES, writer_redis
from apps.writer.submit import receipt_submit
from tests.support.procs import wait_for
from tests.support.session_locks import job_row_locked_elsewhere
from tests.writer.helpers import RunningJob, new_id, receipt, running_jobs_create

pytestmark = pytest.mark.django_db(transaction=True)


def _running(n: int) -> list[RunningJob]:
    specs = [RunningJob(id=new_id(), attempt=1, max_attempts=5) for _ in range(n)]
    running_jobs_create(specs)
    # Leases that have not expired: each test expires the one it means to.
    Job.objects.filter(id__in=[s.id for s in specs]).update(lease_expires_at="2100-01-01T00:00:00Z")
    with connection.cursor() as cur:  # attempts started now, so a lost one's duration is short
        cur.execute(
            "UPDATE jobs_attempt SET started_at = now() WHERE job_id = ANY(%s::uuid[])",
            [[s.id for s in specs]],
        )
    return specs


def _expire_lease_now(job_id: str) -> None:
    with connection.cursor() as cur:
        cur.execute("UPDATE jobs_job SET lease_expires_at = now() WHERE id = %s", [job_id])


def test_a_receipt_behind_a_lock_held_past_its_retry_schedule_is_dead_and_other_leases_are_swept(
    settings,
) -> None:
    settings.SCRAPEJOBS_DATABASE_WRITER_MAX_ATTEMPTS = 4
    settings.SCRAPEJOBS_DATABASE_WRITER_RETRY_DELAY_SECONDS = 0.2  # retries 0.2, 0.4, 0.8 s apart
    settings.SCRAPEJOBS_DATABASE_WRITE_TIMEOUT_SECONDS = 0.3
    locked_job, lost_job = _running(2)
    locked, release = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=job_row_locked_elsewhere, args=(locked_job.id, locked, release), kwargs={"hold_s": 60}
    )
    holder.start()
    try:
        assert locked.wait(10)
        stream_id = receipt_submit(receipt(locked_job.id, 1))
        first = writer_flush_once()
        assert (first.applied, first.failed, first.dead) == (0, 1, 0)
        assert writer_redis().hget(TRIES, stream_id) == "1"  # busy, and counted
        # Another job's worker dies now; its receipt never comes.
        _expire_lease_now(lost_job.id)
        time.sleep(1.2)  # the lease is 1.2 s past; the stuck receipt has waited longer

        swept = jobs_sweep_stuck()
        assert swept.requeued == 1
        assert Job.objects.get(id=lost_job.id).status == JobStatus.QUEUED
        lost = Attempt.objects.get(job_id=lost_job.id, number=1)
        assert lost.outcome == AttemptOutcome.LOST
        assert Job.objects.get(id=locked_job.id).status == JobStatus.RUNNING  # its receipt waits: kept

        wait_for(
            lambda: writer_flush_once().dead == 1, timeout=20, interval=0.1, what="the receipt to be dead"
        )
    finally:
        release.set()
        holder.join()
    [dead] = dead_receipts_list()
    assert (dead.receipt or {})["job_id"] == locked_job.id and dead.stream_id == stream_id
    assert dead.attempts == 4 and dead.error.startswith("busy: ")
    assert writer_redis().xlen(STREAM) == 0


def test_a_retried_receipt_is_applied_alone_not_bisected_with_its_round_again(settings) -> None:
    """A receipt on its retry is one transaction of its own: the receipts read with it are
    applied in their batch at once, not after the retried one's timeout and a bisection."""
    settings.SCRAPEJOBS_DATABASE_WRITER_MAX_ATTEMPTS = 5
    settings.SCRAPEJOBS_DATABASE_WRITER_RETRY_DELAY_SECONDS = 0.1
    settings.SCRAPEJOBS_DATABASE_WRITE_TIMEOUT_SECONDS = 0.3
    locked_job, *others = _running(9)
    locked, release = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=job_row_locked_elsewhere, args=(locked_job.id, locked, release), kwargs={"hold_s": 60}
    )
    holder.start()
    try:
        assert locked.wait(10)
        receipt_submit(receipt(locked_job.id, 1))
        assert writer_flush_once().failed == 1
        time.sleep(0.2)  # its retry is due
        for s in others:
            receipt_submit(receipt(s.id, 1))
        again = writer_flush_once()
    finally:
        release.set()
        holder.join()
    assert (again.applied, again.failed) == (8, 1)
    # One transaction for the retried receipt, one for the eight: no bisection.
    assert again.transactions == 2


def test_a_receipt_waiting_past_the_bound_no_longer_holds_back_the_sweep(settings) -> None:
    """A receipt deferred (the database away) counts in the sweeper's horizon, but only for
    SCRAPEJOBS_SWEEP_RECEIPT_WAIT_MAX_S."""
    waiting_job, lost_job = _running(2)
    r = writer_redis()
    secs, micros = r.time()
    old_ms = secs * 1000 + micros // 1000 - 5000
    # A receipt appended 5 s ago and still waiting (written as receipt_submit writes it).
    from apps.jobs.receipts import receipt_encode

    r.xadd(STREAM, {FIELD: receipt_encode(receipt(waiting_job.id, 1))}, id=f"{old_ms}-0")
    _expire_lease_now(lost_job.id)
    # time is the subject: the lease ages past its expiry, by more than the sweeper's margin
    time.sleep(1.2)

    settings.SCRAPEJOBS_SWEEP_RECEIPT_WAIT_MAX_S = 300
    assert jobs_sweep_stuck().requeued == 0  # the writer may only be behind: wait
    settings.SCRAPEJOBS_SWEEP_RECEIPT_WAIT_MAX_S = 2
    assert jobs_sweep_stuck().requeued == 1
    assert Job.objects.get(id=lost_job.id).status == JobStatus.QUEUED
