"""A redirect hop whose domain has no turn ends the attempt as a deferral (NFR-24, NFR-5:
waiting for a domain holds no worker slot), with the real control, beat and worker processes.

The scenario at its size: fifty hosts (127.0.1.1 to 127.0.1.50, each its own domain, each
its own server) all redirect to one domain allowed 2 requests/s. Four worker threads. A hop
refused by that domain does not wait in the thread for its turn: the attempt is recorded
``deferred`` and not counted (the job's ``max_attempts`` stays the caller's; the fold counts it
in ``deferred_attempts``, which the claim leaves out of the budget) and the job starts again from
its own URL when its place in that domain's line comes. So another tenant's jobs to
another domain, submitted meanwhile, finish at once; when the hop waited in the thread, every
thread sat in that domain's line and they waited their turn behind it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from apps.jobs.models import Attempt, Job, JobStatus
from apps.politeness.models import DomainPolicy
from tests.e2e.fault_support import stored_body, submit, wait_all_final
from tests.support.procs import wait_for
from tests.support.target import TargetServer, body_for, stop_servers

# Serial: the gaps between a domain's requests are the subject (make test runs these alone).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

HOSTS = 50
RATE = 2.0  # the domain every host redirects to: requests per second
SLACK_S = 0.1


@pytest.fixture
def servers() -> Iterator[tuple[list[TargetServer], TargetServer, TargetServer]]:
    """The fifty redirecting hosts, the 2 requests/s domain they redirect to, another tenant's
    domain. All on loopback: 127.0.1.1 to 127.0.1.50, 127.0.0.3 and 127.0.0.4."""
    started = [TargetServer(f"127.0.1.{1 + i}").start() for i in range(HOSTS)]
    slow, other = TargetServer("127.0.0.3").start(), TargetServer("127.0.0.4").start()
    yield started, slow, other
    stop_servers([*started, slow, other])


def test_hops_to_a_busy_domain_are_deferred_and_hold_no_thread(services, make_tenant, servers, tmp_path):
    hosts, slow, other = servers
    DomainPolicy.objects.create(domain="127.0.0.3", requests_per_second=RATE, burst=1, max_concurrency=100)
    svc = services(SCRAPEJOBS_PUBLISH_INTERVAL_S="0.25", SCRAPEJOBS_RESULTS_DIR=str(tmp_path / "results"))
    svc.start("control")
    svc.start("beat")
    svc.start("worker", concurrency=4)

    crawler, shop = make_tenant()[0], make_tenant()[0]
    redirected = [
        submit(crawler, host.url(f"/go?to={slow.url(f'/bytes/{500 + i}')}")).id
        for i, host in enumerate(hosts)
    ]
    wait_for(
        lambda: slow.requests_for("/bytes/"), timeout=30, interval=0.05, what="a hop to reach the busy domain"
    )

    started = time.monotonic()
    shop_jobs = [submit(shop, other.url(f"/bytes/{900 + i}")).id for i in range(10)]
    wait_all_final(shop_jobs, timeout=8, what="the other tenant's jobs")
    print(f"the other tenant's 10 jobs were final {time.monotonic() - started:.1f}s after submission")
    wait_all_final(redirected, timeout=HOSTS / RATE + 60, what="the redirected jobs")

    results = tmp_path / "results"
    for n, job_id in enumerate(shop_jobs):
        job = Job.objects.get(id=job_id)
        assert (job.status, job.attempts, job.max_attempts) == (JobStatus.SUCCEEDED, 1, 5)
        assert stored_body(results, job) == body_for(900 + n)
    deferrals = 0
    for n, job_id in enumerate(redirected):
        job = Job.objects.get(id=job_id)
        history = list(
            Attempt.objects.filter(job_id=job_id).order_by("number").values_list("outcome", "error_class")
        )
        deferred = len(history) - 1
        deferrals += deferred
        assert history == [("deferred", "redirect_deferred")] * deferred + [("succeeded", None)], history
        # A deferral is not counted: max_attempts is still the default the job was submitted
        # with, and only the one fetch that ran counts toward it.
        assert job.max_attempts == 5
        assert (job.status, job.attempts, job.deferred_attempts) == (
            JobStatus.SUCCEEDED,
            1 + deferred,
            deferred,
        )
        assert job.last_error is None
        assert stored_body(results, job) == body_for(500 + n)
        # Its host was asked once per attempt: every attempt started again from the job's URL.
        assert len(hosts[n].requests_for("/go")) == 1 + deferred
    assert deferrals > 0  # the busy domain did refuse hops
    # The busy domain saw one request per job, never faster than its rate.
    arrivals = sorted(t for t, *_ in slow.requests_for("/bytes/"))
    assert len(arrivals) == HOSTS
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    # time is the subject: the busy domain's rate: arrivals at least
    # one token apart, less 0.1 s of clock slack
    assert min(gaps) >= 1 / RATE - SLACK_S, gaps
