"""The read cache against writes that race its readers (apps/query/cache.py, NFR-13): a reader
that read a row before a requeue, a result's expiry or a prune committed cannot store it back,
and the web process drops copies of jobs that became final from its start. Each race is run
with a real second thread whose database snapshot predates the write (REPEATABLE READ: its read
sees the row as it was), real PostgreSQL and real Redis; nothing is mocked."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from apps.jobs.cancel_requeue import jobs_requeue
from apps.jobs.models import Job
from apps.jobs.retention import jobs_prune, results_mark_expired
from apps.query import cache
from tests.query import helpers
from tests.support.threads import CheckedThread

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = "/api/v1/jobs"


def _read_from_before(write: Callable[[], Any], *, tenant_id: Any, job_id: Any) -> Job | None:
    """A reader whose read of the job happens before ``write`` commits and whose store in the
    cache happens after: its snapshot is taken, then ``write`` runs and commits (in this
    thread), then the reader goes through the cache's read (miss, database, store)."""
    snapshot_taken, written = threading.Event(), threading.Event()
    found: list[Job | None] = []

    def reader() -> None:
        try:
            with transaction.atomic():
                with connection.cursor() as cur:
                    cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    cur.execute("SELECT 1 FROM jobs_job LIMIT 1")  # the snapshot is taken here
                snapshot_taken.set()
                assert written.wait(10)
                found.append(cache.job_read(tenant_id=tenant_id, job_id=job_id))
        finally:
            connection.close()

    t = CheckedThread(target=reader)
    t.start()
    assert snapshot_taken.wait(10)
    write()
    written.set()
    t.join()
    return found[0]


def test_a_reader_from_before_a_requeue_cannot_store_the_final_row_back(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.failed(tenant)
    assert api.get(f"{JOBS}/{job.id}").json()["status"] == "failed"  # cached for a day

    stale = _read_from_before(lambda: jobs_requeue(job_ids=[job.id]), tenant_id=tenant.id, job_id=job.id)
    assert stale is not None and stale.status == "failed"  # it did read the old row
    assert api.get(f"{JOBS}/{job.id}").json()["status"] == "queued"
    assert api.get(f"{JOBS}/{job.id}").json()["status"] == "queued"  # and the cache holds that now


def test_a_reader_from_before_a_results_expiry_cannot_store_the_unexpired_row_back(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.succeeded(tenant)
    assert api.get(f"{JOBS}/{job.id}").json()["result_expired"] is False  # cached for a day

    _read_from_before(lambda: results_mark_expired(job_ids=[job.id]), tenant_id=tenant.id, job_id=job.id)
    assert api.get(f"{JOBS}/{job.id}").json()["result_expired"] is True
    assert api.get(f"{JOBS}/{job.id}/result").status_code == 410


def test_a_pruned_job_is_404_at_once_even_for_a_reader_from_before_the_prune(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.failed(tenant)
    Job.objects.filter(id=job.id).update(finished_at=timezone.now() - timedelta(days=400))
    assert api.get(f"{JOBS}/{job.id}").status_code == 200  # cached for a day

    def prune() -> None:
        assert jobs_prune(finished_before=timezone.now() - timedelta(days=1), limit=10) == 1

    _read_from_before(prune, tenant_id=tenant.id, job_id=job.id)
    assert api.get(f"{JOBS}/{job.id}").status_code == 404
    assert api.get(f"{JOBS}/{job.id}/attempts").status_code == 404


def test_every_write_of_a_job_bumps_its_version(make_tenant):
    tenant, _, _ = make_tenant()
    job = helpers.queued(tenant)
    seen = [Job.objects.get(id=job.id).version]
    running = helpers.running(tenant)
    seen.append(running.version)
    done = helpers.finish(running, result=None, outcome="failed_permanent", http_status=404)
    assert done.version > running.version > 0 == seen[0]
    jobs_requeue(job_ids=[done.id])
    assert Job.objects.get(id=done.id).version > done.version


@pytest.mark.e2e
def test_the_web_process_drops_a_finished_jobs_copy_before_any_wait(services, make_tenant):
    """The listener starts with the web process: with no ``?wait=`` ever asked, a cached running
    job is seen final at once when it ends, not after the cache's TTL (30 s here)."""
    import requests

    from tests.support.net import free_port
    from tests.support.procs import wait_for, wait_for_web

    port = free_port()
    web = services().start("web", port=port, workers=1, env={"SCRAPEJOBS_READ_CACHE_TTL_S": "30"})
    tenant, token, _ = make_tenant()
    wait_for_web(web, port)
    job = helpers.running(tenant)
    url, auth = f"http://127.0.0.1:{port}{JOBS}/{job.id}", {"Authorization": f"Bearer {token}"}
    assert requests.get(url, headers=auth, timeout=5).json()["status"] == "running"  # now cached
    assert requests.get(url, headers=auth, timeout=5).json()["status"] == "running"  # from the cache

    helpers.finish(job, result=None, outcome="failed_permanent", http_status=404, error_class="http_404")
    wait_for(
        lambda: requests.get(url, headers=auth, timeout=5).json()["status"] == "failed",
        timeout=5,
        what="the finished job to be read final",
    )
