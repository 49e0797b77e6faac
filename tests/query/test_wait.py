"""GET /api/v1/jobs/{id}?wait=N: FR-2 (status) with contract section 6 waiting (LISTEN before
read, NOTIFY wakes, a timer covers a lost notification). Real threads, real PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection

from apps.jobs.models import Job
from apps.query import selectors
from tests.query import helpers
from tests.support.procs import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = "/api/v1/jobs"


def later(delay: float, action: Callable[[], object]) -> threading.Thread:
    """Run ``action`` in another thread (its own database connection) after ``delay`` seconds."""

    def run() -> None:
        try:
            time.sleep(delay)
            action()
        finally:
            connection.close()

    t = threading.Thread(target=run)
    t.start()
    return t


def timed_get(api, path: str, **params) -> tuple[float, dict]:
    start = time.monotonic()
    r = api.get(path, params)
    assert r.status_code == 200, r.content
    return time.monotonic() - start, r.json()


def test_a_wait_returns_as_soon_as_another_process_finishes_the_job(make_tenant, monkeypatch):
    # With the safety re-read pushed out of reach, only the notification can end the wait early.
    monkeypatch.setattr(selectors, "WAIT_RECHECK_S", 60.0)
    tenant, _, api = make_tenant()
    job = helpers.running(tenant)
    t = later(0.5, lambda: helpers.finish(job))
    elapsed, body = timed_get(api, f"{JOBS}/{job.id}", wait=20)
    t.join()
    assert body["status"] == "succeeded"
    assert 0.4 < elapsed < 5


def test_a_wait_is_woken_by_a_cancel(make_tenant, monkeypatch):
    from apps.jobs.cancel_requeue import job_cancel

    monkeypatch.setattr(selectors, "WAIT_RECHECK_S", 60.0)
    tenant, _, api = make_tenant()
    job = helpers.queued(tenant)
    t = later(0.3, lambda: job_cancel(job_id=job.id))
    elapsed, body = timed_get(api, f"{JOBS}/{job.id}", wait=20)
    t.join()
    assert body["status"] == "cancelled"
    assert elapsed < 5


def test_a_wait_on_an_unfinished_job_answers_after_n_seconds_with_its_current_state(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.running(tenant)
    elapsed, body = timed_get(api, f"{JOBS}/{job.id}", wait=2)
    assert body["status"] == "running"
    assert 1.9 < elapsed < 4


def test_another_jobs_notification_does_not_end_the_wait(make_tenant, monkeypatch):
    monkeypatch.setattr(selectors, "WAIT_RECHECK_S", 60.0)
    tenant, _, api = make_tenant()
    mine = helpers.running(tenant)
    other = helpers.running(tenant)
    t = later(0.3, lambda: helpers.finish(other))
    elapsed, body = timed_get(api, f"{JOBS}/{mine.id}", wait=2)
    t.join()
    assert body["status"] == "running"
    assert elapsed > 1.9


def test_a_lost_notification_is_covered_by_the_timer(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.running(tenant)
    # A change that sends no NOTIFY at all (as if the notification were lost).
    t = later(0.3, lambda: Job.objects.filter(id=job.id).update(status="failed"))
    elapsed, body = timed_get(api, f"{JOBS}/{job.id}", wait=20)
    t.join()
    assert body["status"] == "failed"
    assert elapsed < selectors.WAIT_RECHECK_S + 3


def test_a_wait_on_a_final_job_answers_at_once(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.succeeded(tenant)
    elapsed, body = timed_get(api, f"{JOBS}/{job.id}", wait=30)
    assert body["status"] == "succeeded"
    assert elapsed < 1


def test_wait_zero_does_not_wait(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.running(tenant)
    elapsed, body = timed_get(api, f"{JOBS}/{job.id}", wait=0)
    assert body["status"] == "running"
    assert elapsed < 1


def test_waits_leave_no_database_connection_behind(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.running(tenant)

    def listeners() -> int:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%%'"
            )
            return cur.fetchone()[0]

    seen_during: list[int] = []
    t = later(0.5, lambda: seen_during.append(listeners()))
    for _ in range(3):
        timed_get(api, f"{JOBS}/{job.id}", wait=1)
    t.join()
    assert seen_during == [1]  # the first wait was listening on its own connection
    # A closed connection's backend leaves pg_stat_activity a moment after the client hangs up.
    wait_for(lambda: listeners() == 0, timeout=5, what="the listener connections to close")
