"""A broker Redis that goes silent, resets connections mid-stream or trickles hangs no process and
loses no job (NFR-37, NFR-3, NFR-4; docs/settings.md, "PostgreSQL and Redis").

Real control, beat and worker processes reach the broker (``CELERY_BROKER_URL``) through a
loopback TCP proxy (tests/support/tcp_proxy.py); the state Redis and PostgreSQL stay direct. While
jobs run, some of them slow, the proxy misbehaves for three leases, then forwards again
(tests/e2e/proxy_faults.py checks every job, every process and the time to recover).

What the broker's network bounds (SCRAPEJOBS_BROKER_*) are for: a publish, an acknowledgement or a
connect sent into the fault fails after the socket timeout instead of waiting for ever, a worker's
BRPOP that never gets its answer is dropped by kombu's health check, and Celery reconnects every
process once the broker answers. A scrape message lost with a connection (BRPOP popped it, the
reset took it) leaves its job published and unclaimed: the sweeper publishes it again (NFR-4).
"""

from __future__ import annotations

import pytest
from django.conf import settings

from tests.e2e.fault_support import FAST, fast_env
from tests.e2e.proxy_faults import (
    Fault,
    black_hole,
    jobs_through_a_fault,
    redis_through_a_proxy,
    reset_after,
    thin_pipe,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LEASE_S = int(FAST["SCRAPEJOBS_LEASE_S"])
FAULT_S = 3 * LEASE_S
# A job's target answers after 0 s (done before the fault), one lease (ends during it) or the
# fault and a bit (still fetching when it ends); fewer jobs than the PostgreSQL test's: the broker
# carries one message per job, and these prove the same with less.
DELAYS = (0, 0, LEASE_S + 1, LEASE_S + 1, FAULT_S + 2, FAULT_S + 2)
# Once the proxy forwards again: every job final within this long (a process reconnects within
# the socket timeout plus Celery's first retry intervals, a lost message is published again after
# SCRAPEJOBS_REPUBLISH_AFTER_S, a lost lease swept, the slowest target answers) ...
RECOVERY_BOUND_S = 40.0
# ... and a job submitted then (its target answers at once) succeeds within this long.
FRESH_JOB_BOUND_S = 20.0
# Short network bounds, so that a call into the fault fails in seconds, not the default's 30.
BROKER_BOUNDS = {
    "SCRAPEJOBS_BROKER_SOCKET_TIMEOUT_S": "3",
    "SCRAPEJOBS_BROKER_CONNECT_TIMEOUT_S": "2",
    "SCRAPEJOBS_BROKER_KEEPALIVE_IDLE_S": "2",
    "SCRAPEJOBS_BROKER_HEALTH_CHECK_INTERVAL_S": "2",
}


def _through_the_proxy(fault: Fault, services, make_tenant, target, tmp_path) -> None:  # type: ignore[no-untyped-def]
    proxy, through_proxy = redis_through_a_proxy(settings.CELERY_BROKER_URL)
    try:
        # Every process reaches the broker through the proxy, its state Redis directly.
        svc = services(
            **fast_env(
                tmp_path / "results",
                CELERY_BROKER_URL=through_proxy,
                REDIS_URL=settings.REDIS_URL,
                **BROKER_BOUNDS,
            )
        )
        jobs_through_a_fault(
            svc,
            make_tenant,
            target,
            proxy,
            fault=fault,
            fault_s=FAULT_S,
            delays=DELAYS,
            recovery_bound_s=RECOVERY_BOUND_S,
            fresh_bound_s=FRESH_JOB_BOUND_S,
        )
    finally:
        proxy.stop()


def test_a_black_hole_in_front_of_the_broker_for_three_leases_hangs_no_process_and_every_job_succeeds(
    services, make_tenant, target, tmp_path
):
    """The connections open during the black hole are stranded after it: every process whose
    connection was in the middle of a call (beat's publish, the publisher's, the worker's BRPOP)
    gets past it by the broker's socket timeout and health check only (without them beat and the
    publisher waited for ever, and no job was published again)."""
    _through_the_proxy(black_hole(strand=True), services, make_tenant, target, tmp_path)


def test_broker_connections_reset_mid_stream_again_and_again_lose_no_job(
    services, make_tenant, target, tmp_path
):
    """Each connection is reset once it carried 3,000 bytes: about ten of a worker's idle BRPOPs
    (a dozen queue keys each, both ways), or a message and a half (a scrape message is about 2 KB),
    so during the fault every connection of every process is reset, often in the middle of a
    command or of its answer."""
    _through_the_proxy(reset_after(3000, at_least=3), services, make_tenant, target, tmp_path)


def test_a_thin_pipe_to_the_broker_slows_jobs_down_and_loses_none(services, make_tenant, target, tmp_path):
    """1,000 bytes a second each way per connection: a scrape message takes about two seconds to
    arrive, a BRPOP's answer may take longer than its health check allows (the connection is
    dropped and made again), a publish may run into the socket timeout."""
    _through_the_proxy(thin_pipe(1000), services, make_tenant, target, tmp_path)
