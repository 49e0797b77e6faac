"""A PostgreSQL or a Redis that goes silent while jobs run hangs no process and loses no job
(NFR-37, NFR-3, NFR-4; docs/settings.md, "PostgreSQL and Redis").

Real control, beat and worker processes reach the server through a loopback TCP proxy
(tests/support/tcp_proxy.py): every process for PostgreSQL, the worker alone for the state Redis
(``REDIS_URL``). While 30 jobs run, some of them slow, the proxy turns into a black hole for a few
lease periods: new connections are accepted and never answered, open ones carry nothing either
way. Then it forwards again. Every job must end ``succeeded``, no target may be fetched more often
than its job's recorded attempts, every process must still be alive, every job must be final
within a stated bound after the fault, and a job submitted then must succeed within another: no
process was left hanging on a connection the partition took.

A job may run twice: a worker that cannot reach Redis writes no lease mark, and the sweeper may
call its attempt lost and run the job again (NFR-4). That is allowed, as long as the second fetch
is a recorded attempt.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db import connection

from apps.jobs.models import Attempt, Job, JobStatus
from tests.e2e.fault_support import FAST, fast_env, submit, wait_all_final
from tests.support.procs import Proc, wait_for
from tests.support.target import TargetServer
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LEASE_S = int(FAST["SCRAPEJOBS_LEASE_S"])
BLACK_HOLE_S = 3 * LEASE_S
REDIS_BLACK_HOLE_S = 4 * LEASE_S
JOBS = 30
# Seconds each job's target takes to answer: a third at once (done before the fault), a third
# ending during it, a third after it (still fetching when the proxy forwards again).
DELAYS = (0, LEASE_S + 1, BLACK_HOLE_S + 3)
# Once the proxy forwards again: every job final within this long (leases lost in the fault are
# swept and run again: lease + sweep + the slowest target, with room for a loaded machine) ...
RECOVERY_BOUND_S = 45.0
# ... and a job submitted then (its target answers at once) succeeds within this long.
FRESH_JOB_BOUND_S = 20.0


def _ready(proc: Proc) -> bool:
    assert proc.alive(), proc.tail()
    return "ready." in proc.log.read_text(errors="replace")


def _jobs_through_a_black_hole(
    svc: Any,
    make_tenant: Any,
    target: TargetServer,
    proxy: TcpProxy,
    black_hole_s: float,
    worker_env: dict[str, str] | None = None,
) -> None:
    """Start control, beat and a worker (``svc``'s environment, and ``worker_env`` for the worker,
    route them through ``proxy``), run JOBS jobs, black-hole the proxy for ``black_hole_s`` while the slow ones
    fetch, restore it, and check every job and process."""
    control = svc.start("control")
    beat = svc.start("beat")
    worker = svc.start("worker", concurrency=JOBS + 10, env=worker_env)
    wait_for(lambda: _ready(control) and _ready(worker), 60, what="control and worker ready")

    tenant, _, _ = make_tenant()
    paths = [f"/bytes/{4000 + i}" for i in range(JOBS)]
    jobs = [
        submit(tenant, target.url(f"{p}?delay={DELAYS[i % len(DELAYS)]}"), max_attempts=5)
        for i, p in enumerate(paths)
    ]
    ids = [j.id for j in jobs]
    slow = [j.id for i, j in enumerate(jobs) if DELAYS[i % len(DELAYS)]]
    # The slow jobs are running (claimed, their targets fetching) when the fault starts.
    wait_for(
        lambda: (
            Job.objects.filter(id__in=slow, status=JobStatus.RUNNING).count() == len(slow)
            and len(target.requests_for("/bytes/")) >= JOBS
        ),
        60,
        what="every job claimed and fetching",
    )

    proxy.black_hole()
    # The fault itself: its duration is the subject of this sleep.
    time.sleep(black_hole_s)
    assert proxy.held >= 1  # processes tried to connect and were never answered
    proxy.restore()
    back = time.monotonic()

    wait_all_final(ids, timeout=RECOVERY_BOUND_S, what="jobs after the black hole")
    # time is the subject: every component works again within a stated time after the fault ends
    assert time.monotonic() - back < RECOVERY_BOUND_S

    # No process hung: each is alive, and a job submitted now is published, claimed, fetched,
    # folded and final within the bound.
    for proc in (control, beat, worker):
        assert proc.alive(), proc.tail()
    fresh = submit(tenant, target.url("/bytes/4999"))
    fresh_at = time.monotonic()
    wait_all_final([fresh.id], timeout=FRESH_JOB_BOUND_S, what="a job submitted after the black hole")
    # time is the subject: no process hung, so a new job goes through within a stated time
    assert time.monotonic() - fresh_at < FRESH_JOB_BOUND_S

    statuses = Counter(Job.objects.filter(id__in=[*ids, fresh.id]).values_list("status", flat=True))
    assert statuses == {JobStatus.SUCCEEDED: JOBS + 1}, statuses
    # Never fetched more often than recorded: each target request belongs to an attempt row.
    attempts = Counter(Attempt.objects.filter(job_id__in=ids).values_list("job_id", flat=True))
    fetched = Counter(r[1] for r in target.requests_for("/bytes/"))
    over = {p: (fetched[p], attempts[i]) for i, p in zip(ids, paths, strict=True) if fetched[p] > attempts[i]}
    assert not over, f"targets fetched more often than their jobs' attempts: {over}"
    assert all(fetched[p] >= 1 for p in paths)
    assert fetched["/bytes/4999"] == 1


def test_a_black_hole_in_front_of_postgresql_for_three_leases_hangs_no_process_and_every_job_succeeds(
    services, make_tenant, target, tmp_path
):
    s = connection.settings_dict
    proxy = TcpProxy(
        upstream_host=s.get("HOST") or "127.0.0.1", upstream_port=int(s.get("PORT") or 5432)
    ).start()
    try:
        # Every process of the service reaches PostgreSQL through the proxy.
        svc = services(
            **fast_env(
                tmp_path / "results",
                DATABASE_URL=f"postgres://{s['USER']}@127.0.0.1:{proxy.port}/{s['NAME']}",
                # Short network timeouts (docs/settings.md): a connection opened into the black
                # hole fails after 2 s instead of 10.
                SCRAPEJOBS_DB_CONNECT_TIMEOUT_S="2",
                SCRAPEJOBS_DB_KEEPALIVES_IDLE_S="2",
                SCRAPEJOBS_DB_KEEPALIVES_INTERVAL_S="1",
                SCRAPEJOBS_DB_KEEPALIVES_COUNT="2",
                SCRAPEJOBS_DB_TCP_USER_TIMEOUT_MS="4000",
            )
        )
        _jobs_through_a_black_hole(svc, make_tenant, target, proxy, BLACK_HOLE_S)
    finally:
        proxy.stop()


def test_a_black_hole_in_front_of_the_workers_redis_for_four_leases_hangs_no_process_and_every_job_succeeds(
    services, make_tenant, target, tmp_path
):
    """The worker alone reaches the state Redis (receipts, lease marks, politeness buckets) through
    the proxy; its broker and everyone else's Redis stay direct. Four leases: longer than the state
    client's 10 s socket timeout (apps/redis_clients.py), so the worker's calls into the black hole
    time out rather than wait for its end."""
    state = urlsplit(settings.REDIS_URL)
    proxy = TcpProxy(upstream_host=state.hostname or "127.0.0.1", upstream_port=state.port or 6379).start()
    try:
        svc = services(**fast_env(tmp_path / "results"))
        credentials = state.netloc.rpartition("@")[0]
        through_proxy = state._replace(netloc=f"{credentials}@127.0.0.1:{proxy.port}".lstrip("@")).geturl()
        worker_env = {"REDIS_URL": through_proxy, "CELERY_BROKER_URL": settings.CELERY_BROKER_URL}
        _jobs_through_a_black_hole(svc, make_tenant, target, proxy, REDIS_BLACK_HOLE_S, worker_env)
    finally:
        proxy.stop()
