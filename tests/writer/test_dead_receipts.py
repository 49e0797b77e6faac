"""FR-W4: failing receipts are retried with backoff, isolated from their batch, and end in the
dead receipts after MAX_ATTEMPTS, where operators replay or drop them (services and admin)."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.jobs.models import Job, JobStatus
from apps.writer.dead_receipts import dead_receipts_drop, dead_receipts_replay
from apps.writer.flush import writer_flush_once
from apps.writer.selectors import dead_receipts_list, writer_status
from apps.writer.streams import DEAD_RECEIPTS, STREAM, TRIES
from apps.writer.streams import writer_redis as state_redis
from apps.writer.submit import receipt_submit
from tests.support.procs import wait_for
from tests.support.session_locks import job_row_locked_elsewhere
from tests.writer.helpers import RunningJob, new_id, receipt, running_jobs_create

pytestmark = pytest.mark.django_db(transaction=True)


def _jobs(n: int) -> list[RunningJob]:
    specs = [RunningJob(id=new_id(), attempt=1, max_attempts=5) for _ in range(n)]
    running_jobs_create(specs)
    return specs


def test_a_poison_receipt_lands_in_the_dead_receipts_after_max_attempts_while_its_batch_is_applied(
    settings,
) -> None:
    """FR-W4: two poison receipts (a NUL byte PostgreSQL refuses in text; an HTTP status out of
    smallint range) in one batch with 30 good ones. The first flush applies the 30; each poison
    receipt is retried only after its backoff (0.3 s, then 0.6 s) and set aside as a dead receipt
    on its third failure, with its error; the stream ends empty."""
    settings.SCRAPEJOBS_DATABASE_WRITER_MAX_ATTEMPTS = 3
    settings.SCRAPEJOBS_DATABASE_WRITER_RETRY_DELAY_SECONDS = 0.3
    settings.SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE = 100
    specs = _jobs(32)
    good, (nul, huge) = specs[:30], specs[30:]
    for s in good[:15]:
        receipt_submit(receipt(s.id, 1))
    poison_ids = [
        receipt_submit(receipt(nul.id, 1, "failed_permanent", error="bad\x00byte")),
        receipt_submit(receipt(huge.id, 1, "failed_permanent", http_status=70000)),
    ]
    for s in good[15:]:
        receipt_submit(receipt(s.id, 1))

    r = state_redis()
    started = time.monotonic()
    stats = writer_flush_once()
    assert (stats.applied, stats.failed, stats.dead) == (30, 2, 0)
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 30
    assert r.hmget(TRIES, poison_ids) == ["1", "1"]
    assert writer_flush_once().read == 0  # still in its backoff: not retried yet
    assert r.hmget(TRIES, poison_ids) == ["1", "1"]

    wait_for(lambda: writer_flush_once().dead == 2, timeout=10, interval=0.05, what="dead receipts")
    # time is the subject: both backoffs (0.3 s, then 0.6 s) were waited out before the receipts were dead
    assert time.monotonic() - started >= 0.3 + 0.6
    dead = {d.receipt["job_id"]: d for d in dead_receipts_list() if d.receipt}
    assert set(dead) == {nul.id, huge.id}
    assert "0x00" in dead[nul.id].error and dead[nul.id].attempts == 3
    assert "out of range" in dead[huge.id].error
    assert {d.stream_id for d in dead.values()} == set(poison_ids)
    assert (r.xlen(STREAM), r.hlen(TRIES)) == (0, 0)
    assert Job.objects.get(id=nul.id).status == JobStatus.RUNNING
    status = writer_status()
    assert (status.dead_receipts, status.pending, status.stream_length) == (2, 0, 0)


def test_an_undecodable_entry_goes_to_the_dead_receipts_at_once() -> None:
    """FR-W4: retrying cannot fix a receipt that is not one."""
    state_redis().xadd(STREAM, {"r": "{not json"})
    assert writer_flush_once().dead == 1
    [d] = dead_receipts_list()
    assert d.receipt is None and d.raw == "{not json" and "undecodable" in d.error


def test_a_receipt_that_timed_out_is_retried_and_applied_once_the_lock_is_gone(settings) -> None:
    """FR-W4 with WRITE_TIMEOUT_SECONDS: a job row locked elsewhere makes its receipt's batch time
    out; the batch is bisected, the other receipt is applied, and this one is retried after its
    backoff, each busy failure counted (tests/writer/test_busy_receipts.py: a lock held past the
    whole schedule makes it a dead receipt). Once the lock is gone it is applied."""
    settings.SCRAPEJOBS_DATABASE_WRITER_MAX_ATTEMPTS = 3
    settings.SCRAPEJOBS_DATABASE_WRITE_TIMEOUT_SECONDS = 0.3
    settings.SCRAPEJOBS_DATABASE_WRITER_RETRY_DELAY_SECONDS = 0.2
    blocked, free = _jobs(2)
    locked, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=job_row_locked_elsewhere, args=(blocked.id, locked, release))
    holder.start()
    try:
        assert locked.wait(10)
        receipt_submit(receipt(blocked.id, 1))
        receipt_submit(receipt(free.id, 1))
        stats = writer_flush_once()
        # time is the subject: the receipt's 0.2 s retry backoff passes
        time.sleep(0.3)
        again = writer_flush_once()  # its retry is due: the row is still locked
    finally:
        release.set()
        holder.join()
    assert (stats.applied, stats.deferred, stats.dead, stats.failed) == (1, 0, 0, 1)
    assert (again.applied, again.failed, again.dead) == (0, 1, 0)
    [(pending_id, _)] = state_redis().xrange(STREAM)
    assert dead_receipts_list() == [] and state_redis().hget(TRIES, pending_id) == "2"
    assert Job.objects.get(id=blocked.id).status == JobStatus.RUNNING

    # time is the subject: the second retry's 0.4 s backoff passes
    time.sleep(0.5)
    assert writer_flush_once().applied == 1
    assert Job.objects.get(id=blocked.id).status == JobStatus.SUCCEEDED


def _dead_receipts(n: int) -> None:
    r = state_redis()
    for i in range(n):
        r.xadd(STREAM, {"r": f"garbage {i}"})
    assert writer_flush_once().dead == n


def test_dead_receipts_are_replayed_and_dropped_one_or_in_bulk_through_the_services() -> None:
    """FR-W4: replay puts the receipt back on the writer's stream; drop deletes it."""
    _dead_receipts(5)
    r = state_redis()
    first, second, *rest = [d.id for d in dead_receipts_list()]
    assert dead_receipts_drop(ids=[first]) == 1
    assert dead_receipts_replay(ids=[second]) == 1
    assert r.xlen(DEAD_RECEIPTS) == 3 and r.xlen(STREAM) == 1
    assert [f["r"] for _, f in r.xrange(STREAM)] == ["garbage 3"]
    assert dead_receipts_replay() == 3
    assert r.xlen(DEAD_RECEIPTS) == 0 and r.xlen(STREAM) == 4
    assert writer_flush_once().dead == 4
    assert dead_receipts_drop() == 4
    assert r.xlen(DEAD_RECEIPTS) == 0


def test_operators_see_and_act_on_dead_receipts_in_the_admin() -> None:
    """FR-W4 / visibility: the admin page lists the writer's status and its dead receipts; the
    drop and replay actions (selected, or all) go through the services."""
    _dead_receipts(3)
    admin = get_user_model().objects.create_superuser("ops", "ops@example.test", "pw")
    client = Client()
    client.force_login(admin)
    url = "/admin/writer/writerdeadletter/"
    page = client.get(url)
    assert page.status_code == 200
    body = page.content.decode()
    ids = [d.id for d in dead_receipts_list()]
    assert all(i in body for i in ids) and "lag_ms" in body and "dead_receipts" in body
    assert url in client.get("/admin/").content.decode()

    res = client.post(url, {"action": "drop", "scope": "selected", "ids": [ids[0]]})
    assert res.status_code == 302
    assert [d.id for d in dead_receipts_list()] == ids[1:]
    res = client.post(url, {"action": "replay", "scope": "all"})
    assert res.status_code == 302
    r = state_redis()
    assert r.xlen(DEAD_RECEIPTS) == 0 and r.xlen(STREAM) == 2

    # Without permission: nothing happens.
    staff = get_user_model().objects.create_user("viewer", "v@example.test", "pw", is_staff=True)
    client.force_login(staff)
    assert client.get(url).status_code == 403
    assert client.post(url, {"action": "drop", "scope": "all"}).status_code == 403
    assert r.xlen(STREAM) == 2
