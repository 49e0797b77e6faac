"""FR-W1 (receipts go to Redis, not to the database) and FR-W2 (the fold is idempotent and the
first final state wins), through the stream and the writer's flush."""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command

from apps.jobs.claims import job_claim
from apps.jobs.intake import job_create
from apps.jobs.models import Attempt, Job, JobStatus
from apps.jobs.receipts import COMPACT_V1, receipt_decode
from apps.writer.flush import writer_flush_once
from apps.writer.streams import FIELD, STREAM
from apps.writer.streams import writer_redis as state_redis
from apps.writer.submit import receipt_submit
from tests.writer.helpers import T0, RunningJob, new_id, receipt, running_jobs_create

pytestmark = pytest.mark.django_db(transaction=True)


def _claimed_job(make_tenant) -> str:  # type: ignore[no-untyped-def]
    tenant, _, _ = make_tenant()
    job, _ = job_create(tenant_id=tenant.id, url="http://target.test/a", domain="target.test")
    assert job_claim(job_id=job.id, worker="w1") is not None
    return str(job.id)


def test_submitting_a_receipt_appends_it_to_the_stream_without_touching_the_database(
    make_tenant, django_assert_num_queries
) -> None:
    """FR-W1: one XADD carrying the natural key; the job changes only when the writer runs."""
    job_id = _claimed_job(make_tenant)
    with django_assert_num_queries(0):
        entry_id = receipt_submit(receipt(job_id, 1))
    [(got_id, fields)] = state_redis().xrange(STREAM)
    assert got_id == entry_id
    body = json.loads(fields[FIELD])
    assert body[:3] == [COMPACT_V1, job_id, 1]  # the compact form: version, then the natural key
    assert receipt_decode(fields[FIELD]) == receipt(job_id, 1)
    assert Job.objects.get(id=job_id).status == JobStatus.RUNNING

    stats = writer_flush_once()
    assert (stats.held, stats.acked, stats.applied) == (True, 1, 1)
    assert Job.objects.get(id=job_id).status == JobStatus.SUCCEEDED
    assert state_redis().xlen(STREAM) == 0  # applied receipts leave the stream


def test_a_stale_attempt_receipt_cannot_move_a_finished_job(make_tenant) -> None:
    """FR-W2: after attempt 1 succeeded, a later receipt for attempt 1 saying it failed changes
    neither the job nor the attempt row (the first final state wins)."""
    job_id = _claimed_job(make_tenant)
    receipt_submit(receipt(job_id, 1, "succeeded"))
    writer_flush_once()
    before = Job.objects.values().get(id=job_id)
    receipt_submit(receipt(job_id, 1, "failed_permanent", finished_at=time.time()))
    stats = writer_flush_once()
    assert (stats.acked, stats.applied, stats.stale) == (1, 0, 1)
    assert Job.objects.values().get(id=job_id) == before
    assert Attempt.objects.get(job_id=job_id, number=1).outcome == "succeeded"


def test_a_receipt_for_an_older_attempt_cannot_move_the_job_of_a_newer_one() -> None:
    """FR-W2: the attempt number is the fencing token. The late receipt of an abandoned attempt
    closes its own row but leaves the job, now on attempt 2, alone."""
    spec = RunningJob(id=new_id(), attempt=2, max_attempts=5, open_earlier=(1,))
    running_jobs_create([spec])
    receipt_submit(receipt(spec.id, 1, "failed_permanent"))
    assert writer_flush_once().stale == 1
    job = Job.objects.get(id=spec.id)
    assert (job.status, job.attempts, job.lease_owner) == (JobStatus.RUNNING, 2, "w")
    assert Attempt.objects.get(job_id=spec.id, number=1).outcome == "failed_permanent"
    assert Attempt.objects.get(job_id=spec.id, number=2).outcome is None

    receipt_submit(receipt(spec.id, 2, "succeeded"))
    assert writer_flush_once().applied == 1
    assert Job.objects.get(id=spec.id).status == JobStatus.SUCCEEDED


def test_within_one_batch_the_first_receipt_of_a_natural_key_wins(settings) -> None:
    """FR-W2: a success and a contradicting receipt for the same attempt in one batch: one is
    applied (the first), the other is acknowledged with it."""
    settings.SCRAPEJOBS_DATABASE_WRITER_CONCURRENCY = 1
    spec = RunningJob(id=new_id(), attempt=1, max_attempts=5)
    running_jobs_create([spec])
    receipt_submit(receipt(spec.id, 1, "succeeded"))
    receipt_submit(receipt(spec.id, 1, "failed_permanent"))
    receipt_submit(receipt(spec.id, 1, "succeeded"))
    stats = writer_flush_once()
    assert (stats.read, stats.acked, stats.applied, stats.transactions) == (3, 3, 1, 1)
    assert Job.objects.get(id=spec.id).status == JobStatus.SUCCEEDED
    assert Attempt.objects.get(job_id=spec.id, number=1).outcome == "succeeded"


def test_receipts_are_applied_in_batches_of_at_most_batch_size_split_by_job(settings) -> None:
    """The writer applies BATCH_SIZE receipts per transaction over CONCURRENCY connections."""
    settings.SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE = 25
    settings.SCRAPEJOBS_DATABASE_WRITER_CONCURRENCY = 3
    specs = [RunningJob(id=new_id(), attempt=1, max_attempts=5) for _ in range(300)]
    running_jobs_create(specs)
    for s in specs:
        receipt_submit(receipt(s.id, 1))
    stats = writer_flush_once()
    assert (stats.acked, stats.applied) == (300, 300)
    assert 12 <= stats.transactions <= 12 + 3 * 4  # 300/25, plus partial batches per connection
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 300


def test_writer_status_reports_lag_backlog_and_batches(capsys) -> None:
    """Visibility: `manage.py writer_status` shows the lag of unapplied receipts, then the
    batch sizes once the writer ran."""
    specs = [RunningJob(id=new_id(), attempt=1, max_attempts=5) for _ in range(3)]
    running_jobs_create(specs)
    for s in specs:
        receipt_submit(receipt(s.id, 1))
    # time is the subject: the receipts age 50 ms, the lag writer_status must show
    time.sleep(0.05)
    call_command("writer_status")
    out = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert (out["stream_length"], out["unread"], out["dead_receipts"]) == ("3", "3", "0")
    assert int(out["lag_ms"]) >= 50

    writer_flush_once()
    call_command("writer_status")
    out = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert (out["stream_length"], out["lag_ms"], out["last_batch_sizes"]) == ("0", "0", "3")


def test_jobs_made_final_by_the_writer_are_announced_on_commit() -> None:
    """FR-W2: the batch transaction NOTIFYs `scrapejobs_job_final` for each job it made final
    (what `?wait=` listens to), and not for a job sent back to the queue."""
    import psycopg
    from django.db import connection

    final, retried = (RunningJob(id=new_id(), attempt=1, max_attempts=5) for _ in range(2))
    running_jobs_create([final, retried])
    s = connection.settings_dict
    with psycopg.connect(
        host=s["HOST"] or None, port=s["PORT"] or None, user=s["USER"], dbname=s["NAME"], autocommit=True
    ) as listener:
        listener.execute("LISTEN scrapejobs_job_final")
        receipt_submit(receipt(final.id, 1, "failed_permanent"))
        receipt_submit(receipt(retried.id, 1, "failed_temporary"))
        assert writer_flush_once().applied == 2
        heard = [n.payload for n in listener.notifies(timeout=2, stop_after=2)]
    assert heard == [final.id]
    assert Job.objects.get(id=retried.id).status == JobStatus.QUEUED


def test_one_batch_picks_each_jobs_next_state_from_its_locked_row(settings) -> None:
    """FR-W2 in one transaction (the statement picks, per job, the plan for "cancel asked",
    "last attempt" or neither): a retry goes back to the queue with a backoff, a last attempt
    fails, a cancel asked for wins over a retry but not over a success, a duplicate and two
    stale receipts (an older attempt; a job already final) move nothing, and only the jobs made
    final are announced."""
    import psycopg
    from django.db import connection

    settings.SCRAPEJOBS_DATABASE_WRITER_CONCURRENCY = 1
    retry = RunningJob(id=new_id(), attempt=1, max_attempts=5)
    last = RunningJob(id=new_id(), attempt=3, max_attempts=3)
    cancel_retry = RunningJob(id=new_id(), attempt=1, max_attempts=5, cancel_requested=True)
    cancel_success = RunningJob(id=new_id(), attempt=1, max_attempts=5, cancel_requested=True)
    cancel_last = RunningJob(id=new_id(), attempt=2, max_attempts=2, cancel_requested=True)
    older = RunningJob(id=new_id(), attempt=2, max_attempts=5, open_earlier=(1,))
    final = RunningJob(id=new_id(), attempt=1, max_attempts=5)
    running_jobs_create([retry, last, cancel_retry, cancel_success, cancel_last, older, final])
    receipt_submit(receipt(final.id, 1, "failed_permanent"))
    assert writer_flush_once().applied == 1

    s = connection.settings_dict
    with psycopg.connect(
        host=s["HOST"] or None, port=s["PORT"] or None, user=s["USER"], dbname=s["NAME"], autocommit=True
    ) as listener:
        listener.execute("LISTEN scrapejobs_job_final")
        receipt_submit(receipt(retry.id, 1, "failed_temporary", retry_after_s=600))
        receipt_submit(receipt(retry.id, 1, "succeeded"))  # duplicate key: ignored
        receipt_submit(receipt(last.id, 3, "failed_temporary"))
        receipt_submit(receipt(cancel_retry.id, 1, "failed_temporary"))
        receipt_submit(receipt(cancel_success.id, 1, "succeeded"))
        receipt_submit(receipt(cancel_last.id, 2, "failed_temporary"))
        receipt_submit(receipt(older.id, 1, "succeeded"))  # stale: the job is on attempt 2
        receipt_submit(receipt(final.id, 1, "succeeded"))  # stale: the job is final
        stats = writer_flush_once()
        heard = sorted(n.payload for n in listener.notifies(timeout=1, stop_after=4))

    assert (stats.read, stats.acked, stats.applied, stats.stale, stats.transactions) == (
        8,
        8,
        5,
        2,
        1,
    )  # the duplicate is acknowledged, not applied
    jobs = {j.id.hex: j for j in Job.objects.all()}

    def job(spec: RunningJob) -> Job:
        return jobs[spec.id.replace("-", "")]

    moved = job(retry)
    assert (moved.status, moved.published_at, moved.finished_at) == (JobStatus.QUEUED, None, None)
    assert moved.not_before is not None and moved.not_before >= T0 + timedelta(
        seconds=61 + 600
    )  # finished at T0+61, Retry-After
    assert moved.last_error == {"class": "http_5xx", "message": "HTTP 503 on attempt 1", "http_status": 503}
    assert moved.result_key is None and moved.lease_owner is None
    assert (job(last).status, job(last).not_before) == (JobStatus.FAILED, None)
    # No callback_url: nothing to announce, so the fold's write leaves it announced already.
    assert job(last).finished_at is not None and job(last).final_published_at is not None
    assert job(cancel_retry).status == JobStatus.CANCELLED
    assert job(cancel_last).status == JobStatus.CANCELLED  # a cancel wins over the last failure
    won = job(cancel_success)
    assert (won.status, won.result_key, won.last_error) == (
        JobStatus.SUCCEEDED,
        f"results/{cancel_success.id}",
        None,
    )
    assert won.result_stored_at == won.finished_at is not None
    assert (job(older).status, job(older).attempts) == (JobStatus.RUNNING, 2)
    assert Attempt.objects.get(job_id=older.id, number=1).outcome == "succeeded"
    assert Attempt.objects.get(job_id=older.id, number=2).outcome is None
    assert job(final).status == JobStatus.FAILED
    assert Attempt.objects.get(job_id=final.id, number=1).outcome == "failed_permanent"
    assert Attempt.objects.get(job_id=retry.id, number=1).outcome == "failed_temporary"
    assert heard == sorted([last.id, cancel_retry.id, cancel_success.id, cancel_last.id])


def test_the_fold_leaves_a_job_without_a_callback_announced_and_one_with_a_callback_to_the_webhooks() -> None:
    """A job without a callback_url has nothing in the end-of-job outbox: its final write stamps
    it (one row version fewer per job, NFR-15); one with a callback_url waits, unstamped, for the
    webhooks' enqueuer, which gives it its delivery."""
    from apps.webhooks.models import WebhookDelivery
    from apps.webhooks.services import webhooks_enqueue_final

    plain = RunningJob(id=new_id(), attempt=1, max_attempts=5)
    hooked = RunningJob(id=new_id(), attempt=1, max_attempts=5, callback_url="http://127.0.0.1:9/hook")
    retried = RunningJob(id=new_id(), attempt=1, max_attempts=5)
    running_jobs_create([plain, hooked, retried])
    receipt_submit(receipt(plain.id, 1, "succeeded"))
    receipt_submit(receipt(hooked.id, 1, "failed_permanent"))
    receipt_submit(receipt(retried.id, 1, "failed_temporary"))
    assert writer_flush_once().applied == 3

    announced = dict(Job.objects.values_list("id", "final_published_at"))
    assert announced[uuid.UUID(plain.id)] is not None
    assert announced[uuid.UUID(hooked.id)] is None
    assert announced[uuid.UUID(retried.id)] is None  # not final: not announced either way
    assert webhooks_enqueue_final() == 1
    assert WebhookDelivery.objects.get().job_id == uuid.UUID(hooked.id)
