"""A scrape worker that starts while PostgreSQL or its Redis is away (NFR-8, NFR-37; the warm-up:
apps/scraping/warm_up.py): it becomes ready without the step that needed the missing server,
says so in its log, and once the server is back its jobs run as those of a warm worker do.

Real control, beat and worker processes; the worker alone reaches the server through a loopback
TCP proxy (tests/support/tcp_proxy.py) that refuses every connection while it is cut, as a server
that is restarting does. The republish stays at its 300 s default: a job that waited for it would
miss the bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from apps.jobs.models import AttemptOutcome, JobStatus
from tests.e2e.fault_support import attempt_history, fast_env, sha256, submit, wait_all_final
from tests.e2e.proxy_faults import redis_through_a_proxy
from tests.support.procs import Proc, wait_for
from tests.support.target import TargetServer, body_for
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

THREADS = 3
# Every job submitted once the server is back is final within this long: a few fetches of a local
# target, far below the 300 s republish.
BACK_BOUND_S = 30.0


def _log(proc: Proc) -> str:
    return proc.log.read_text(errors="replace")


def _warm_up_line(worker: Proc) -> str:
    """The worker's report of its warm-up, once it has made it (it is ready then)."""
    wait_for(
        lambda: f"warm-up for {THREADS} threads:" in _log(worker), timeout=60, what="the warm-up's report"
    )
    line = next(line for line in _log(worker).splitlines() if f"warm-up for {THREADS} threads:" in line)
    return line.split(f"warm-up for {THREADS} threads:", 1)[1].strip()


def _warm_up_with_the_server_away(
    services, tmp_path: Path, proxy: TcpProxy, worker_env: dict[str, str], *, report: str, failure: str
) -> None:
    """Control and beat as usual, then a worker that reaches the server through ``proxy``, cut
    before it starts: it becomes ready with the warm-up's ``report`` and ``failure`` logged, having
    tried the server, and stays up. Then the proxy forwards again."""
    proxy.cut()
    svc = services(**fast_env(tmp_path / "results", SCRAPEJOBS_REPUBLISH_AFTER_S="300"))
    svc.start("control")
    svc.start("beat")
    worker = svc.start("worker", concurrency=THREADS, env=worker_env)
    assert _warm_up_line(worker) == report
    assert failure in _log(worker)
    assert proxy.refused >= 1  # the warm-up did try, through the cut proxy
    assert worker.alive()
    proxy.restore()


def _jobs_run_once(make_tenant, target: TargetServer, first: int) -> None:
    """Four jobs submitted now all succeed, each in one attempt and one fetch of its own body."""
    tenant, _, _ = make_tenant()
    jobs = [submit(tenant, target.url(f"/bytes/{first + i}")) for i in range(4)]
    wait_all_final([j.id for j in jobs], timeout=BACK_BOUND_S, what="jobs after the server came back")
    for i, job in enumerate(jobs):
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED, job.last_error
        assert attempt_history(job) == [(1, AttemptOutcome.SUCCEEDED, None)]
        assert job.result_sha256 == sha256(body_for(first + i))
        assert len(target.requests_for(f"/bytes/{first + i}")) == 1


def test_a_worker_started_while_postgresql_is_away_is_ready_and_claims_once_it_is_back(
    services, make_tenant, target, tmp_path: Path
):
    s = connection.settings_dict
    proxy = TcpProxy(
        upstream_host=s.get("HOST") or "127.0.0.1", upstream_port=int(s.get("PORT") or 5432)
    ).start()
    try:
        _warm_up_with_the_server_away(
            services,
            tmp_path,
            proxy,
            # No pool for this worker: its warm-up's connection is refused at once instead of
            # waiting for the pool's checkout (the bounded wait has a test of its own, tests/scraping).
            {
                "DATABASE_URL": f"postgres://{s['USER']}@127.0.0.1:{proxy.port}/{s['NAME']}",
                "SCRAPEJOBS_DB_POOL": "false",
            },
            report=f"{{'statements': 0, 'scripts': 1, 'connections': {THREADS}}}",
            failure="warm-up: the claim statement could not be prepared",
        )
        _jobs_run_once(make_tenant, target, 4000)
    finally:
        proxy.stop()


def test_a_worker_started_while_its_redis_is_away_is_ready_and_runs_jobs_once_it_is_back(
    services, make_tenant, target, tmp_path: Path
):
    """The state Redis (the gate's script, receipts, lease marks); the broker stays reachable."""
    proxy, through_proxy = redis_through_a_proxy(settings.REDIS_URL)
    try:
        _warm_up_with_the_server_away(
            services,
            tmp_path,
            proxy,
            {"REDIS_URL": through_proxy, "CELERY_BROKER_URL": settings.CELERY_BROKER_URL},
            report="{'statements': 1, 'scripts': 0, 'connections': 0}",
            failure="warm-up: Redis could not be reached",
        )
        # Back: the first job's gate finds no script loaded and loads it.
        _jobs_run_once(make_tenant, target, 4100)
    finally:
        proxy.stop()
