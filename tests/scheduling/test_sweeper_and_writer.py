"""The sweeper and a writer that is behind (NFR-3, NFR-4, FR-W2).

A worker stops renewing its lease once it has handed its receipt to the writer; until the writer
applies it the job is still `running`. A lagging or restarting writer must not make the sweeper
call those attempts lost (and fetch them again), while a worker that really died is still swept.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs.claims import job_claim
from apps.jobs.intake import job_create
from apps.jobs.models import Attempt, Job, JobStatus
from apps.jobs.receipts import AttemptFinished
from apps.scheduling.services import jobs_sweep_expired_leases
from apps.writer.flush import writer_flush_once
from apps.writer.selectors import receipts_waiting_for_s
from apps.writer.streams import FIELD, RETRY_AT, STREAM, TRIES, writer_redis
from apps.writer.submit import receipt_submit

pytestmark = pytest.mark.django_db


def _running_job_with_expired_lease(tenant, seconds_ago: float) -> Job:
    job, _ = job_create(tenant_id=tenant.id, url="http://t.example/x", domain="t.example")
    assert job_claim(job_id=job.id, worker="w@host:1:1") is not None
    Job.objects.filter(id=job.id).update(lease_expires_at=timezone.now() - timedelta(seconds=seconds_ago))
    return job


def _finished(job: Job, outcome: str = "failed_permanent") -> AttemptFinished:
    return AttemptFinished(
        job_id=str(job.id),
        attempt=1,
        outcome=outcome,
        finished_at=time.time(),
        duration_ms=3,
        http_status=404,
        error_class="http_404",
        error="not found",
    )


def test_a_job_whose_receipt_waits_for_the_writer_is_not_swept_as_lost(make_tenant):
    tenant, _, _ = make_tenant()
    job = _running_job_with_expired_lease(tenant, seconds_ago=5)
    # The worker handed its receipt over 8 s ago, while its lease was still valid (it renews
    # every lease/3, so a receipt always predates the expiry); the writer is behind.
    handed_over_ms = int(time.time() * 1000) - 8_000
    writer_redis().xadd(STREAM, {FIELD: json.dumps(_finished(job).to_dict())}, id=f"{handed_over_ms}-0")
    assert receipts_waiting_for_s() is not None

    stats = jobs_sweep_expired_leases()

    assert stats.lost == 0
    assert Job.objects.get(id=job.id).status == JobStatus.RUNNING
    writer_flush_once()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.attempts == 1
    assert Attempt.objects.get(job=job, number=1).outcome == "failed_permanent"  # not "lost"


def test_a_job_of_a_dead_worker_is_swept_even_while_newer_receipts_wait(make_tenant):
    tenant, _, _ = make_tenant()
    dead = _running_job_with_expired_lease(tenant, seconds_ago=10)
    other = _running_job_with_expired_lease(tenant, seconds_ago=-60)  # alive: lease in the future
    receipt_submit(_finished(other))  # submitted now, long after `dead`'s lease expired

    stats = jobs_sweep_expired_leases()

    assert stats.lost == 1
    assert Attempt.objects.get(job=dead, number=1).outcome == "lost"
    assert Job.objects.get(id=dead.id).status == JobStatus.QUEUED


def test_a_receipt_waiting_for_a_retry_does_not_hold_the_sweeper_back(make_tenant):
    tenant, _, _ = make_tenant()
    dead = _running_job_with_expired_lease(tenant, seconds_ago=10)
    # A poison receipt from long ago, scheduled for another try: the writer set it aside.
    # (A failure counted against it: TRIES. A receipt deferred only because the database was
    # down has none, and holds the sweeper back like any receipt: see the next tests.)
    r = writer_redis()
    poison = r.xadd(STREAM, {FIELD: "{}"}, id=f"{int(time.time() * 1000) - 600_000}-0")
    r.zadd(RETRY_AT, {poison: time.time() * 1000 + 60_000})
    r.hset(TRIES, poison, 1)

    assert receipts_waiting_for_s() is None
    assert jobs_sweep_expired_leases().lost == 1
    assert Attempt.objects.get(job=dead, number=1).outcome == "lost"


def test_with_nothing_waiting_the_watermark_is_empty():
    assert receipts_waiting_for_s() is None


# --- A PostgreSQL outage (NFR-3, NFR-4) ---------------------------------------
# While the database is away workers cannot renew their leases, so leases run out although the
# workers are alive; receipts handed over during the outage come after those leases ran out, so
# the watermark above does not cover them. The sweeper asks about each job instead.


def test_a_job_whose_receipt_came_after_its_lease_ran_out_is_not_swept_while_it_waits(make_tenant):
    tenant, _, _ = make_tenant()
    job = _running_job_with_expired_lease(tenant, seconds_ago=30)
    newer = _running_job_with_expired_lease(tenant, seconds_ago=-60)
    receipt_submit(_finished(job, outcome="succeeded"))  # now, 30 s after its lease ran out
    receipt_submit(_finished(newer))  # the writer is behind on both

    stats = jobs_sweep_expired_leases()

    assert (stats.lost, stats.kept) == (0, 1)
    assert Job.objects.get(id=job.id).status == JobStatus.RUNNING
    writer_flush_once()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 1)
    assert Attempt.objects.get(job=job, number=1).outcome == "succeeded"  # not "lost"


def test_a_job_whose_worker_keeps_its_lease_mark_is_not_swept(make_tenant):
    from apps.redis_clients import lease_mark_key

    tenant, _, _ = make_tenant()
    alive = _running_job_with_expired_lease(tenant, seconds_ago=30)
    other_attempt = _running_job_with_expired_lease(tenant, seconds_ago=30)
    r = writer_redis()
    r.set(lease_mark_key(str(alive.id)), 1, px=5_000)  # its worker's keeper, PostgreSQL being away
    r.set(lease_mark_key(str(other_attempt.id)), 7, px=5_000)  # a mark of another attempt: no say

    stats = jobs_sweep_expired_leases()

    assert (stats.lost, stats.kept) == (1, 1)
    assert Job.objects.get(id=alive.id).status == JobStatus.RUNNING
    assert Attempt.objects.get(job=other_attempt, number=1).outcome == "lost"


def test_a_receipt_applied_or_set_aside_no_longer_holds_its_job(make_tenant):
    from apps.writer.dead_receipts import dead_receipt_add
    from apps.writer.selectors import receipts_waiting
    from apps.writer.streams import WAITING, waiting_field

    tenant, _, _ = make_tenant()
    applied = _running_job_with_expired_lease(tenant, seconds_ago=-60)
    poison = _running_job_with_expired_lease(tenant, seconds_ago=30)
    gone = _running_job_with_expired_lease(tenant, seconds_ago=30)
    receipt_submit(_finished(applied))
    poison_id = receipt_submit(_finished(poison))
    gone_id = receipt_submit(_finished(gone))
    r = writer_redis()
    keys = [(str(j.id), 1) for j in (applied, poison, gone)]
    assert receipts_waiting(keys) == set(keys)

    r.xgroup_create(STREAM, "writer", id="0")  # the writer sets one aside; another is deleted by hand
    dead_receipt_add(
        r, entry_id=poison_id, raw="{}", error="x", attempts=8, waiting=waiting_field(str(poison.id), 1)
    )
    r.xdel(STREAM, gone_id)
    assert receipts_waiting(keys) == {keys[0]}
    assert r.hkeys(WAITING) == [waiting_field(str(applied.id), 1)]  # the stale entry is dropped

    writer_flush_once()
    assert Job.objects.get(id=applied.id).status == JobStatus.FAILED
    assert r.hlen(WAITING) == 0  # applied: no longer waiting
    assert jobs_sweep_expired_leases().lost == 2
