"""Latency: a receipt nudges the writer, so a finished job is final in the ledger within
milliseconds instead of at beat's next tick; a burst of receipts leaves one pending nudge; a nudge
that finds the writer busy is answered by the busy writer."""

from __future__ import annotations

import functools
import time

import pytest
import redis
from django.conf import settings

from apps.jobs.models import Job, JobStatus
from apps.jobs.nudges import NUDGES, WRITER
from apps.redis_clients import state_redis
from apps.writer.flush import writer_flush
from apps.writer.lease import Lease
from apps.writer.streams import GROUP, LEASE_KEY, RETRY_AT, STREAM, WANTED_KEY
from apps.writer.submit import receipt_submit
from tests.support.procs import wait_for
from tests.writer.helpers import RunningJob, new_id, receipt, running_jobs_create

pytestmark = pytest.mark.django_db(transaction=True)


def _status(job_id: str) -> str:
    return str(Job.objects.values_list("status", flat=True).get(id=job_id))


def _is_failed(job_id: str) -> bool:
    return _status(job_id) == JobStatus.FAILED


def _flush_tasks_queued() -> int:
    """Messages waiting in the broker's `control` queue (kombu keeps one Redis list per queue
    and priority step, all named after the queue)."""
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    return sum(int(broker.llen(key)) for key in broker.keys("control*"))


@pytest.mark.e2e
def test_a_receipt_is_applied_by_the_writer_process_with_no_beat_running(services) -> None:
    """Only the control process runs (no beat): the receipt's own nudge starts the flush."""
    ready, later = new_id(), [new_id() for _ in range(5)]
    running_jobs_create([RunningJob(id=i, attempt=1, max_attempts=5) for i in (ready, *later)])
    services().start("control")
    # The process needs a few seconds to boot; until then resubmit (a duplicate is harmless, and a
    # nudge left unconsumed expires) so that the measurement below starts with a listening writer.
    wait_for(
        lambda: receipt_submit(receipt(ready, 1)) and _status(ready) == JobStatus.SUCCEEDED,
        timeout=90,
        interval=0.5,
        what="the control process to start and apply its first nudged receipt",
    )

    # No beat runs, so nothing but a receipt's own nudge can flush. The bound is the nudge's
    # promise (milliseconds, not beat's tick); the wait is longer so that a miss shows its figure.
    latencies = []
    for job_id in later:
        started = time.monotonic()
        receipt_submit(receipt(job_id, 1, "failed_permanent"))
        wait_for(functools.partial(_is_failed, job_id), timeout=30, interval=0.01, what="the nudged flush")
        latencies.append(time.monotonic() - started)
    latencies.sort()
    # time is the subject: the nudge's promise of milliseconds (no beat
    # runs): median under 0.5 s, each under 3 s
    assert latencies[len(latencies) // 2] < 0.5 and latencies[-1] < 3.0, latencies


def test_a_burst_of_receipts_leaves_one_nudge_and_no_broker_message() -> None:
    """No writer consumes the nudges here: 500 receipts leave one pending nudge, not 500, and the
    nudge is no Celery task (a task per nudge cost the worker a seventh of its time)."""
    specs = [RunningJob(id=new_id(), attempt=1, max_attempts=5) for _ in range(500)]
    running_jobs_create(specs)
    for s in specs:
        receipt_submit(receipt(s.id, 1))
    assert state_redis().zrange(NUDGES, 0, -1) == [WRITER]
    assert _flush_tasks_queued() == 0


@pytest.mark.e2e
def test_a_nudge_during_a_flush_is_answered_by_one_more_flush(services) -> None:
    """The receipts appended while a nudged flush runs are applied without beat: their nudges
    collapse into one more run after it (scrapejobs/nudge_listener.py)."""
    specs = [RunningJob(id=new_id(), attempt=1, max_attempts=5) for _ in range(3000)]
    running_jobs_create(specs)
    services().start("control")
    first = specs[0]
    wait_for(
        lambda: receipt_submit(receipt(first.id, 1)) and _status(first.id) == JobStatus.SUCCEEDED,
        timeout=90,
        interval=0.5,
        what="the control process to start",
    )
    for s in specs[1:]:  # a stream of receipts while flushes run
        receipt_submit(receipt(s.id, 1))
    ids = [s.id for s in specs]
    try:
        wait_for(
            lambda: Job.objects.filter(id__in=ids, status=JobStatus.SUCCEEDED).count() == len(specs),
            timeout=30,
            interval=0.1,
            what="every receipt applied with no beat running",
        )
    except AssertionError as e:  # say where the rest are: unread, pending, waiting for a retry
        r = state_redis()
        applied = Job.objects.filter(id__in=ids, status=JobStatus.SUCCEEDED).count()
        raise AssertionError(
            f"{e}: {applied}/{len(specs)} applied; stream {r.xlen(STREAM)}, pending "
            f"{r.xpending(STREAM, GROUP)['pending']}, retries {r.zcard(RETRY_AT)}, nudges {r.zrange(NUDGES, 0, -1)}"
        ) from None
    assert state_redis().zscore(NUDGES, WRITER) is None


def test_a_flush_that_finds_the_lease_taken_leaves_a_mark_for_the_holder() -> None:
    """The busy holder learns, when it releases, that someone asked for a flush meanwhile; with
    no one asking, the mark is not there."""
    r = state_redis()
    holder = Lease(r, key=LEASE_KEY, ttl_ms=5000, owner="holder", wanted_key=WANTED_KEY)
    assert holder.acquire()
    assert holder.release()
    assert not holder.wanted

    assert holder.acquire()
    stats = writer_flush(budget_s=1.0)
    assert not stats.held  # returned at once: the holder is draining
    assert holder.release()
    assert holder.wanted
    assert r.exists(WANTED_KEY) == 0  # the holder consumed it


def test_a_holder_that_finds_a_mark_at_release_drains_once_more() -> None:
    """The race a coalesced nudge could lose: a receipt lands after the holder's last read but
    before its release, and its nudge finds the lease taken (and leaves the mark). The holder
    sees the mark when it releases and drains again before it returns: two lease periods."""
    job_id = new_id()
    running_jobs_create([RunningJob(id=job_id, attempt=1, max_attempts=5)])
    r = state_redis()
    receipt_submit(receipt(job_id, 1))
    r.set(WANTED_KEY, "1", px=5000)  # as left by the nudged flush that found the lease taken
    stats = writer_flush(budget_s=5.0, trace_key="sj:test:holds")
    assert stats.held and stats.applied == 1
    assert r.llen("sj:test:holds") == 2  # the drain, then the one the mark asked for
    assert r.exists(WANTED_KEY) == 0
    assert _status(job_id) == JobStatus.SUCCEEDED

    # With no mark, one drain.
    writer_flush(budget_s=5.0, trace_key="sj:test:holds")
    assert r.llen("sj:test:holds") == 3
