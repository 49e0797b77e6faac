"""A PostgreSQL or a Redis that goes silent, resets connections mid-stream or trickles while jobs
run hangs no process and loses no job (NFR-37, NFR-3, NFR-4; docs/settings.md, "PostgreSQL and
Redis").

Real control, beat and worker processes reach the server through a loopback TCP proxy
(tests/support/tcp_proxy.py): every process for PostgreSQL, the worker alone for the state Redis
(``REDIS_URL``). While 30 jobs run, some of them slow, the proxy turns into a black hole for a few
lease periods: new connections are accepted and never answered, open ones carry nothing either
way (or: every connection is reset once it carried a few kilobytes; or: a few kilobytes a
second each way). Then it forwards again. Every job must end ``succeeded``, no target may be
fetched more often than its job's recorded attempts, every process must still be alive, every
job must be final within a stated bound after the fault, and a job submitted then must succeed
within another: no process was left hanging on a connection the partition took.

A job may run twice: a worker that cannot reach Redis writes no lease mark, and the sweeper may
call its attempt lost and run the job again (NFR-4). That is allowed, as long as the second fetch
is a recorded attempt.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from tests.e2e.fault_support import FAST, fast_env
from tests.e2e.proxy_faults import (
    Fault,
    black_hole,
    jobs_through_a_fault,
    redis_through_a_proxy,
    reset_after,
    thin_pipe,
)
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


def _jobs_through(
    svc: Any,
    make_tenant: Any,
    target: TargetServer,
    proxy: TcpProxy,
    fault: Fault,
    fault_s: float,
    worker_env: dict[str, str] | None = None,
) -> None:
    jobs_through_a_fault(
        svc,
        make_tenant,
        target,
        proxy,
        fault=fault,
        fault_s=fault_s,
        delays=[DELAYS[i % len(DELAYS)] for i in range(JOBS)],
        recovery_bound_s=RECOVERY_BOUND_S,
        fresh_bound_s=FRESH_JOB_BOUND_S,
        worker_env=worker_env,
        body_bytes=4000,
    )


def _through_a_postgresql_proxy(
    services: Any, make_tenant: Any, target: TargetServer, tmp_path: Any, fault: Fault
) -> None:
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
        _jobs_through(svc, make_tenant, target, proxy, fault, BLACK_HOLE_S)
    finally:
        proxy.stop()


def _through_a_state_redis_proxy(
    services: Any, make_tenant: Any, target: TargetServer, tmp_path: Any, fault: Fault, fault_s: float
) -> None:
    """The worker alone reaches the state Redis (receipts, lease marks, politeness buckets) through
    the proxy; its broker and everyone else's Redis stay direct."""
    proxy, through_proxy = redis_through_a_proxy(settings.REDIS_URL)
    try:
        svc = services(**fast_env(tmp_path / "results"))
        worker_env = {"REDIS_URL": through_proxy, "CELERY_BROKER_URL": settings.CELERY_BROKER_URL}
        _jobs_through(svc, make_tenant, target, proxy, fault, fault_s, worker_env)
    finally:
        proxy.stop()


def test_a_black_hole_in_front_of_postgresql_for_three_leases_hangs_no_process_and_every_job_succeeds(
    services, make_tenant, target, tmp_path
):
    _through_a_postgresql_proxy(services, make_tenant, target, tmp_path, black_hole())


def test_postgresql_connections_reset_mid_stream_again_and_again_lose_no_job(
    services, make_tenant, target, tmp_path
):
    """Each connection is reset once it carried 5,000 bytes: a claim or two, a publisher's round
    (at 20,000 a fault of three leases reset two connections); open connections are cut in the
    middle of a statement or of its answer, and the pool's next checkout makes a new one."""
    _through_a_postgresql_proxy(services, make_tenant, target, tmp_path, reset_after(5000, at_least=3))


def test_a_thin_pipe_to_postgresql_slows_jobs_down_and_loses_none(services, make_tenant, target, tmp_path):
    """5,000 bytes a second each way per connection: a claim or a fold of a few kilobytes of SQL
    takes about a second, leases run out and are swept, and every job still ends once."""
    _through_a_postgresql_proxy(services, make_tenant, target, tmp_path, thin_pipe(5000))


def test_a_black_hole_in_front_of_the_workers_redis_for_four_leases_hangs_no_process_and_every_job_succeeds(
    services, make_tenant, target, tmp_path
):
    """Four leases: longer than the state client's 10 s socket timeout (apps/redis_clients.py), so
    the worker's calls into the black hole time out rather than wait for its end."""
    _through_a_state_redis_proxy(services, make_tenant, target, tmp_path, black_hole(), REDIS_BLACK_HOLE_S)


def test_the_workers_redis_connections_reset_mid_stream_again_and_again_lose_no_job(
    services, make_tenant, target, tmp_path
):
    """Each of the worker's state connections is reset once it carried 3,000 bytes: a few
    politeness scripts, lease marks and receipts."""
    _through_a_state_redis_proxy(
        services, make_tenant, target, tmp_path, reset_after(3000, at_least=3), BLACK_HOLE_S
    )


def test_a_thin_pipe_to_the_workers_redis_slows_jobs_down_and_loses_none(
    services, make_tenant, target, tmp_path
):
    """2,000 bytes a second each way per connection: a receipt of a few hundred bytes takes a
    fraction of a second, a politeness script's text more."""
    _through_a_state_redis_proxy(services, make_tenant, target, tmp_path, thin_pipe(2000), BLACK_HOLE_S)
