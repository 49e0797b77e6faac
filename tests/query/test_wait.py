"""GET /api/v1/jobs/{id}?wait=N through the real web process (gunicorn, uvicorn workers, ASGI),
FR-15 and one listener per process wakes the waiters, a waiter holds
no database connection, a timer covers a lost notification. Real PostgreSQL, real processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
import requests
from asgiref.sync import sync_to_async
from django.db import connection

from apps.jobs.final_notices import JOB_FINAL_CHANNEL
from apps.jobs.models import Job
from apps.query.cache import job_read
from apps.query.waiting import final_hub
from tests.query import helpers
from tests.support.net import free_port
from tests.support.procs import wait_for_web
from tests.support.threads import CheckedThread

# Most of these start a web process: the module belongs to the whole suite, not the fast loop.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


class Web:
    def __init__(self, port: int, token: str, tenant: object, master_pid: int):
        self.base, self.token, self.tenant = f"http://127.0.0.1:{port}", token, tenant
        self.master_pid = master_pid

    def get_job(self, job_id: object, **params: int) -> tuple[float, dict]:
        start = time.monotonic()
        r = requests.get(
            f"{self.base}/api/v1/jobs/{job_id}",
            params=params,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        return time.monotonic() - start, r.json()


@pytest.fixture
def start_web(services, make_tenant) -> Iterator[Callable[..., Web]]:
    """Start the web process (scrapejobs.processes.web, one worker) with extra environment."""

    def start(**env: str) -> Web:
        port = free_port()
        proc = services().start("web", port=port, workers=1, env=env)
        tenant, token, _ = make_tenant()

        wait_for_web(proc, port)
        return Web(port, token, tenant, proc.pid)

    yield start


def later(delay: float, action: Callable[[], object]) -> CheckedThread:
    """Run ``action`` in another thread (its own database connection) after ``delay`` seconds."""

    def run() -> None:
        try:
            # time is the subject: the action comes delay seconds into the wait
            time.sleep(delay)
            action()
        finally:
            connection.close()

    t = CheckedThread(target=run)
    t.start()
    return t


def test_a_wait_returns_as_soon_as_another_process_finishes_the_job(start_web):
    # With the re-check pushed out of reach, only the notification can end the wait early.
    web = start_web(SCRAPEJOBS_WAIT_RECHECK_S="60")
    job = helpers.running(web.tenant)
    t = later(0.5, lambda: helpers.finish(job))
    elapsed, body = web.get_job(job.id, wait=20)
    t.join()
    assert body["status"] == "succeeded"
    # time is the subject: the wait wakes on the finish at 0.5 s, within 3 s, where
    # the recheck would come at 60 s and the wait end at 20 s
    assert 0.4 < elapsed < 3


def test_a_wait_is_woken_by_a_cancel(start_web):
    from apps.jobs.cancel_requeue import job_cancel

    web = start_web(SCRAPEJOBS_WAIT_RECHECK_S="60")
    job = helpers.queued(web.tenant)
    t = later(0.3, lambda: job_cancel(job_id=job.id))
    elapsed, body = web.get_job(job.id, wait=20)
    t.join()
    assert body["status"] == "cancelled"
    # time is the subject: the wait wakes on the cancel at 0.3 s, within 3 s, where
    # the recheck would come at 60 s and the wait end at 20 s
    assert elapsed < 3


def test_a_wait_on_an_unfinished_job_answers_after_n_seconds_with_its_current_state(start_web):
    web = start_web()
    job = helpers.running(web.tenant)
    elapsed, body = web.get_job(job.id, wait=2)
    assert body["status"] == "running", body
    # time is the subject: a wait's length: ?wait=2 answers after its 2 s, not at once nor much later
    assert 1.9 < elapsed < 4


def test_another_jobs_notification_does_not_end_the_wait(start_web):
    web = start_web(SCRAPEJOBS_WAIT_RECHECK_S="60")
    mine, other = helpers.running(web.tenant), helpers.running(web.tenant)
    t = later(0.3, lambda: helpers.finish(other))
    elapsed, body = web.get_job(mine.id, wait=2)
    t.join()
    assert body["status"] == "running"
    # time is the subject: a wait's length: another job's finish does not end this ?wait=2 before its 2 s
    assert elapsed > 1.9


def test_with_notifications_suppressed_a_wait_answers_within_one_recheck_interval(start_web):
    web = start_web(SCRAPEJOBS_WAIT_RECHECK_S="1")
    job = helpers.running(web.tenant)
    web.get_job(job.id)  # the running row is now in the read cache too (2 s)
    # A change that sends no NOTIFY at all (as if every notification were lost).
    changed_at: list[float] = []

    def change() -> None:
        Job.objects.filter(id=job.id).update(status="failed")
        changed_at.append(time.monotonic())

    t = later(0.3, change)
    _, body = web.get_job(job.id, wait=20)
    answered_at = time.monotonic()
    t.join()
    assert body["status"] == "failed"
    # One interval of 1 s, plus the request's own round trips.
    assert answered_at - changed_at[0] < 1.5, answered_at - changed_at[0]


def test_a_wait_on_a_final_job_answers_at_once(start_web):
    web = start_web()
    job = helpers.succeeded(web.tenant)
    elapsed, body = web.get_job(job.id, wait=30)
    assert body["status"] == "succeeded"
    # time is the subject: a final job answers within 1 s, where the wait asked for is 30 s
    assert elapsed < 1


def _connections() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(cur.fetchone()[0])


def _wait_all(web: Web, jobs: list[Job], wait: int) -> None:
    waiters = [CheckedThread(target=web.get_job, args=(j.id,), kwargs={"wait": wait}) for j in jobs]
    for w in waiters:
        w.start()
    for w in waiters:
        w.join()


def test_waiting_callers_hold_no_database_connection(start_web):
    web = start_web(SCRAPEJOBS_WAIT_RECHECK_S="60")
    jobs = [helpers.running(web.tenant) for _ in range(50)]
    # A first round: the listener connects, and the pool grows to what 50 reads at once need.
    _wait_all(web, jobs, wait=1)
    before = _connections()
    seen: list[int] = []
    t = later(1.5, lambda: seen.append(_connections()))
    _wait_all(web, jobs, wait=3)
    t.join()
    # 50 callers waiting at once hold no connection of their own (the old design opened a LISTEN
    # connection per waiter, +50): the count is what the process had before they came, give or
    # take the pool's growing by a connection or two for the burst of first reads.
    assert seen[0] <= before + 2, (before, seen)


def test_a_change_between_the_read_and_the_wait_is_not_missed():
    """Forces the interleaving: the waiter registers, reads the job (running), THEN the job ends
    and its notice is sent, and only then does the waiter start to wait. The re-check is out of
    reach, so only registering before the read can wake it."""

    async def scenario(job: Job) -> float:
        hub = final_hub()
        hub.recheck_s = 60.0
        with hub.watch("00000000-0000-0000-0000-000000000000"):
            await asyncio.wait_for(hub.listening.wait(), timeout=10)  # the listener is up
        with hub.watch(str(job.id)) as changed:
            read = await sync_to_async(_read_closing, thread_sensitive=False)(job)
            assert read is not None and read.status == "running"
            await sync_to_async(_finish_closing, thread_sensitive=False)(job)
            start = time.monotonic()
            await asyncio.wait_for(changed.wait(), timeout=5)
            return time.monotonic() - start

    tenant = _tenant()
    job = helpers.running(tenant)
    assert asyncio.run(scenario(job)) < 2


def _tenant() -> object:
    from apps.tenants.services import tenant_create

    return tenant_create(name="interleaving").tenant


def _read_closing(job: Job) -> Job | None:
    try:
        return job_read(tenant_id=job.tenant_id, job_id=job.id)
    finally:
        connection.close()


def _finish_closing(job: Job) -> None:
    try:
        helpers.finish(job)
    finally:
        connection.close()


@pytest.mark.e2e
def test_a_wait_admitted_at_the_rate_limit_ends_with_its_answer_not_a_429(services, make_tenant):
    """Burst 1 at 1 request/s: the wait spends the one token; the wake-up's re-read when the job
    ends is the same request's, not another charge (FR-16)."""
    port = free_port()
    proc = services().start("web", port=port, workers=1, env={"SCRAPEJOBS_RATE_LIMIT_BURST": "1"})
    tenant, token, _ = make_tenant(rate_limit_per_second=1)
    wait_for_web(proc, port)
    web = Web(port, token, tenant, proc.pid)
    job = helpers.running(tenant)
    t = later(0.3, lambda: helpers.finish(job))
    elapsed, body = web.get_job(job.id, wait=10)  # asserts the 200
    t.join()
    assert body["status"] == "succeeded"
    # time is the subject: the wait wakes on the finish at 0.3 s, within 3 s, where the wait asked for is 10 s
    assert elapsed < 3


def _scans(table: str) -> int:
    """Scans of ``table`` by every backend, as the statistics hold them once flushed: a backend's
    are flushed when it exits (the web process below runs without a pool, so every read's
    connection ends with its read)."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute(
            "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = %s",
            [table],
        )
        return int(cur.fetchone()[0])


def _settled_scans(table: str) -> int:
    """``_scans`` once it has not moved for a second (the last backends have exited)."""
    last, still_since, deadline = _scans(table), time.monotonic(), time.monotonic() + 20
    while time.monotonic() - still_since < 1.0:
        # time is the subject: a deadline of 20 s for the scan counts to stop moving, not a measurement
        assert time.monotonic() < deadline, f"the scans of {table} never settled"
        # time is the subject: the scans must stay still for a second
        time.sleep(0.2)
        now = _scans(table)
        if now != last:
            last, still_since = now, time.monotonic()
    return last


def test_a_wait_authenticates_once_however_often_it_wakes(start_web):
    """FR-16: a waiter's re-reads are the request's own. With the token cache off, every
    authentication is a read of the token table; with the read cache off, every wake-up is a
    read of the job's row. Five notices for the job (it stays running) wake the waiter five
    times: the job table is read at each wake-up, the token table exactly as often as for a
    plain GET. (The re-check is out of reach: its query reads the job table too.)"""
    web = start_web(
        SCRAPEJOBS_WAIT_RECHECK_S="60",
        SCRAPEJOBS_TOKEN_CACHE_S="0",
        SCRAPEJOBS_READ_CACHE_TTL_S="0",
        SCRAPEJOBS_DB_POOL="false",
    )
    job = helpers.running(web.tenant)

    tokens = _settled_scans("tenants_apitoken")
    _, body = web.get_job(job.id)
    one_request = _settled_scans("tenants_apitoken") - tokens
    assert one_request >= 1  # the measure sees an authentication
    assert body["status"] == "running"

    def notify_five_times() -> None:
        with connection.cursor() as cur:
            for _ in range(5):
                # time is the subject: notices 0.4 s apart, all within the one wait
                time.sleep(0.4)
                cur.execute("SELECT pg_notify(%s, %s)", [JOB_FINAL_CHANNEL, str(job.id)])

    tokens, jobs = _settled_scans("tenants_apitoken"), _settled_scans("jobs_job")
    t = later(0.2, notify_five_times)
    elapsed, body = web.get_job(job.id, wait=4)
    t.join()
    # time is the subject: a wait's length: notices for other jobs do not end this ?wait=4 before its 4 s
    assert body["status"] == "running" and elapsed > 3.9
    job_reads = _settled_scans("jobs_job") - jobs
    assert job_reads >= 5, job_reads  # it was woken, and read the job again, each time
    assert _settled_scans("tenants_apitoken") - tokens == one_request
