"""A scrape worker warms its connections up before its first message (apps/scraping/warm_up.py,
NFR-8, NFR-11): the claim prepared, the gate's script in Redis, the state Redis connections open;
each step best effort, and none of them changes a job. A worker that starts while PostgreSQL or its
Redis is away: tests/e2e/test_warm_up_outages.py (real servers behind a proxy that is cut)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest
from django.db import connection

from apps.jobs.claims import job_claim
from apps.jobs.models import Attempt
from apps.politeness import limiter
from apps.redis_clients import state_redis
from apps.scraping import warm_up
from apps.scraping.warm_up import worker_warm_up, worker_warm_up_bounded
from tests.support.factories import job_make
from tests.support.procs import wait_for

_ACQUIRE_SHA = hashlib.sha1(limiter._ACQUIRE.encode()).hexdigest()


def _open_connections() -> int:
    pool = state_redis().connection_pool
    connections: list[object] = list(pool._connections)  # type: ignore[attr-defined]
    return len([c for c in connections if c is not None and getattr(c, "_sock", None) is not None])


@pytest.mark.django_db
def test_the_warm_up_prepares_the_claim_loads_the_gate_script_and_opens_connections(tenant) -> None:
    job = job_make(tenant, "http://warm.test/1")
    state_redis().script_flush()
    done = worker_warm_up(threads=4)
    assert done == {"statements": 1, "scripts": 1, "connections": 4}
    assert state_redis().script_exists(_ACQUIRE_SHA) == [True]
    assert _open_connections() >= 4
    with connection.cursor() as cur:  # the test's transaction keeps the session it ran on
        cur.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%%INSERT INTO jobs_attempt%%'"
        )
        assert cur.fetchone()[0] == 1
    # Nothing changed: no job taken, no attempt written; the next claim is an ordinary one.
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("queued", 0)
    assert Attempt.objects.count() == 0
    claimed = job_claim(job_id=job.id, worker="w:1:1")
    assert claimed is not None and claimed.attempt == 1


def test_a_worker_waits_for_a_stuck_warm_up_only_so_long(monkeypatch, caplog) -> None:
    stuck, ended = threading.Event(), threading.Event()

    def waits_for_the_pool() -> None:  # as a database that is away makes the pool's wait
        try:
            stuck.wait(30)
        finally:
            ended.set()

    monkeypatch.setattr(warm_up, "claim_statement_prepare", waits_for_the_pool)
    # The time is the subject: how long the worker's start waits for its warm-up.
    assert worker_warm_up_bounded(threads=1, wait_s=0.2) is None
    assert "warm-up still running after 0 s; the worker starts without it" in caplog.text
    assert not ended.is_set()  # still running on its own thread, not waited for
    stuck.set()
    assert ended.wait(10)
    wait_for(
        lambda: not any(t.name == "warm-up" for t in threading.enumerate()),
        timeout=10,
        interval=0.05,
        what="the warm-up to end",
    )


@pytest.mark.e2e
def test_a_started_worker_is_warm_before_its_first_message(services, tmp_path: Path) -> None:
    state_redis().script_flush()
    svc = services(SCRAPEJOBS_RESULTS_DIR=str(tmp_path / "results"))
    worker = svc.start("worker", concurrency=3)
    wait_for(lambda: " ready." in worker.tail(200), timeout=60, interval=0.05, what="the worker ready")
    log = worker.tail(200)
    assert "warm-up for 3 threads: {'statements': 1, 'scripts': 1, 'connections': 3}" in log, log
    # Loaded by the warm-up, as no job was submitted: the first job's gate finds it.
    assert state_redis().script_exists(_ACQUIRE_SHA) == [True]
