"""Hostile and broken targets against the real control, beat and worker processes (NFR-5, NFR-22,
NFR-23; docs/limits.md "Targets"): a robots.txt written to make a backtracking matcher run for
ever, a target on an IPv6 literal, and a port that refuses connections next to a live one.

Every target is on loopback: 127.0.0.x (each address its own domain) and ``[::1]``.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from apps.jobs.models import Attempt, Job, JobStatus
from apps.politeness.models import DomainPolicy
from apps.politeness.selectors import domain_state_get
from tests.e2e.fault_support import attempt_history, stored_body, submit, wait_all_final
from tests.support.procs import wait_for
from tests.support.target import TargetServer, body_for

pytestmark = pytest.mark.e2e


def env(tmp_path: Path) -> dict[str, str]:
    return {
        "SCRAPEJOBS_ROBOTS_OBEY": "true",
        "SCRAPEJOBS_PUBLISH_INTERVAL_S": "0.25",
        "SCRAPEJOBS_RESULTS_DIR": str(tmp_path / "results"),
    }


def state(job_id: uuid.UUID) -> tuple[str, int, str | None]:
    job = Job.objects.get(id=job_id)
    return job.status, job.attempts, (job.last_error or {}).get("class")


def wait_for_request(server: TargetServer, path: str, timeout: float = 30) -> None:
    wait_for(lambda: server.requests_for(path), timeout=timeout, interval=0.05, what=f"a request for {path}")


@pytest.fixture
def second_target() -> Iterator[TargetServer]:
    server = TargetServer("127.0.0.2").start()
    yield server
    server.stop()


def test_a_hostile_robots_txt_stalls_neither_its_worker_nor_another_domains_job(
    services, make_tenant, target, second_target, tmp_path
):
    """NFR-22: rules a backtracking regular expression never finishes (``.*a.*a...b`` against a
    run of ``a`` with no ``b``) on one target, a long path of ``a``: the matcher is linear, so the
    same worker process finishes an ordinary job of another domain meanwhile, and the hostile
    target's jobs end at once with the right verdicts (the path without a ``b`` allowed, the one
    with it disallowed and never requested)."""
    target.robots = (200, "User-agent: *\nDisallow: /*a*a*a*a*a*a*a*a*b\nDisallow: /*a*a*a*a*a*a*a*a*a*c$\n")
    run = "a" * 4000
    svc = services(**env(tmp_path))
    svc.start("control")
    svc.start("beat")
    svc.start("worker", concurrency=4)
    tenant = make_tenant()[0]
    hostile_allowed = submit(tenant, target.url(f"/bytes/10/{run}")).id
    hostile_disallowed = submit(tenant, target.url(f"/bytes/11/{run}b")).id
    wait_for_request(target, "/robots.txt")

    started = time.monotonic()
    ordinary = submit(make_tenant()[0], second_target.url("/bytes/12")).id
    wait_all_final([ordinary], timeout=15, what="the other domain's job")
    print(f"the other domain's job was final {time.monotonic() - started:.1f}s after its submission")
    wait_all_final([hostile_allowed, hostile_disallowed], timeout=15, what="the hostile target's jobs")

    assert state(ordinary) == (JobStatus.SUCCEEDED, 1, None)
    assert state(hostile_allowed) == (JobStatus.SUCCEEDED, 1, None)
    assert state(hostile_disallowed) == (JobStatus.FAILED, 1, "robots_disallowed")
    assert stored_body(tmp_path / "results", Job.objects.get(id=hostile_allowed)) == body_for(10)
    assert [p[:10] for _, p, *_ in target.requests_for("/bytes/")] == ["/bytes/10/"]


def test_the_robots_txt_of_an_ipv6_literal_target_is_fetched_and_obeyed(services, make_tenant, tmp_path):
    """NFR-5: ``http://[::1]:port/robots.txt``, bracketed. Unbracketed, the file's URL did not
    parse, which read as "no robots.txt" (allow everything) and the disallowed path was fetched."""
    server = TargetServer("::1").start()
    try:
        server.robots = (200, "User-agent: *\nDisallow: /status/\n")
        svc = services(**env(tmp_path))
        svc.start("control")
        svc.start("beat")
        svc.start("worker", concurrency=2)
        tenant = make_tenant()[0]
        disallowed = submit(tenant, server.url("/status/200")).id
        allowed = submit(tenant, server.url("/bytes/20")).id
        assert server.url("/").startswith("http://[::1]:")
        wait_all_final([disallowed, allowed], timeout=30)

        assert state(disallowed) == (JobStatus.FAILED, 1, "robots_disallowed")
        assert state(allowed) == (JobStatus.SUCCEEDED, 1, None)
        assert server.requests_for("/status/") == []
        assert len(server.requests_for("/robots.txt")) == 1
    finally:
        server.stop()


def test_a_port_refusing_connections_holds_back_its_own_origin_only(services, make_tenant, target, tmp_path):
    """NFR-23 (RFC 9309 2.3: robots.txt is scoped to scheme, host and port): one tenant's job to
    a closed port of 127.0.0.1 cannot fetch that port's robots.txt (connection refused), which
    disallows that origin for SCRAPEJOBS_ROBOTS_UNAVAILABLE_S; another tenant's job to the live
    port of the same host, submitted right after, is not held back (it waited the whole minute
    as ``domain_paused`` when the pause was the host's)."""
    with socket.socket() as s:  # a port nobody listens on: bound, then closed
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    svc = services(**env(tmp_path))
    svc.start("control")
    svc.start("beat")
    svc.start("worker", concurrency=4)
    dead = submit(make_tenant()[0], f"http://127.0.0.1:{closed_port}/bytes/30", max_attempts=1).id
    wait_all_final([dead], timeout=30, what="the closed port's job")
    assert state(dead) == (JobStatus.FAILED, 1, "robots_unavailable")

    started = time.monotonic()
    live = submit(make_tenant()[0], target.url("/bytes/31")).id
    wait_all_final([live], timeout=15, what="the live port's job")
    print(f"the live port's job was final {time.monotonic() - started:.1f}s after its submission")
    assert state(live) == (JobStatus.SUCCEEDED, 1, None)
    assert attempt_history(Job.objects.get(id=live)) == [(1, "succeeded", None)]
    assert len(target.requests_for("/robots.txt")) == 1


def test_a_port_refusing_the_jobs_own_connections_slows_neither_its_host_nor_another_tenant(
    services, make_tenant, target, tmp_path
):
    """NFR-23 with robots.txt off: one tenant's jobs to a closed port of 127.0.0.1 are refused on
    their own URL (connection refused, each attempt, five times), with the adaptive rate on as
    `make run` has it and a host policy that is not the bottleneck (20 requests/s). A refusal is
    no answer that says the host is overloaded: it pauses nothing and lowers no rate, so another
    tenant's jobs to the live port of the same host, submitted once the first refusal is
    recorded, are fetched at once."""
    DomainPolicy.objects.create(domain="127.0.0.1", requests_per_second=20, burst=20, max_concurrency=4)
    with socket.socket() as s:  # a port nobody listens on: bound, then closed
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    svc = services(
        **{**env(tmp_path), "SCRAPEJOBS_ROBOTS_OBEY": "false", "SCRAPEJOBS_DOMAIN_ADAPTIVE": "true"}
    )
    svc.start("control")
    svc.start("beat")
    svc.start("worker", concurrency=4)
    refused_tenant, live_tenant = make_tenant()[0], make_tenant()[0]
    dead = [submit(refused_tenant, f"http://127.0.0.1:{closed_port}/bytes/{40 + i}").id for i in range(3)]
    wait_for(
        lambda: Attempt.objects.filter(job_id__in=dead, error_class="connection_error").exists(),
        timeout=30,
        interval=0.05,
        what="a refused attempt",
    )

    started = time.monotonic()
    live = [submit(live_tenant, target.url(f"/bytes/{50 + i}")).id for i in range(3)]
    wait_all_final(live, timeout=5, what="the live port's jobs")
    print(f"the live port's jobs were final {time.monotonic() - started:.1f}s after their submission")
    host = domain_state_get(domain="127.0.0.1")
    assert (host.cooldown_s, host.adaptive_rps or 20.0) == (0.0, 20.0), host  # no pause, no cut
    wait_all_final(dead, timeout=60, what="the refused jobs")

    for n, job_id in enumerate(live):
        job = Job.objects.get(id=job_id)
        assert (job.status, job.attempts, job.defer_reason) == (JobStatus.SUCCEEDED, 1, None)
        assert stored_body(tmp_path / "results", job) == body_for(50 + n)
    for job_id in dead:
        job = Job.objects.get(id=job_id)
        assert state(job_id) == (JobStatus.FAILED, 5, "connection_error")
        assert attempt_history(job) == [(n, "failed_temporary", "connection_error") for n in range(1, 6)]
    assert domain_state_get(domain="127.0.0.1").cooldown_s == 0.0
    assert len(target.requests_for("/bytes/")) == 3
