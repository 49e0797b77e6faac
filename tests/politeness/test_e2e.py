"""Politeness with the real control, beat and worker processes against a local target (NFR-5
(politeness), NFR-5): a domain's rate and concurrency cap hold across every worker thread,
waiting spends no attempt and no worker slot, and a Retry-After slows down only its own domain.

Two domains on one local server: ``127.0.0.1`` and ``localhost`` are different domain strings.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.jobs.models import Job, JobStatus
from apps.politeness.models import DomainPolicy
from apps.politeness.selectors import domain_state_get
from tests.e2e.fault_support import submit, wait_all_final
from tests.support.procs import wait_for

# Serial: the gaps between a domain's requests are the subject (make test runs these alone).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

# The publisher's cadence here: a deferred job is sent again at the first tick after its time.
ENV = {"SCRAPEJOBS_PUBLISH_INTERVAL_S": "0.25"}
# Clock slack between a grant in a worker and the request's arrival at the target.
SLACK_S = 0.1


def env(tmp_path: Path) -> dict[str, str]:
    return {**ENV, "SCRAPEJOBS_RESULTS_DIR": str(tmp_path / "results")}


def assert_all_succeeded_at_the_first_attempt(ids: list) -> None:
    rows = list(Job.objects.filter(id__in=ids).values_list("status", "attempts"))
    assert rows == [(JobStatus.SUCCEEDED, 1)] * len(ids), rows


def test_a_domain_limited_to_2_per_second_is_never_sent_more_and_waiting_spends_no_attempt(
    services, make_tenant, target, tmp_path
):
    """NFR-5 (politeness): ten jobs at once to a domain with 2 requests/s, burst 1, over ten
    worker threads: the target sees them at least 0.5 s apart (less a little clock slack), and
    every job succeeds at its first attempt although most were refused and deferred first."""
    DomainPolicy.objects.create(domain="127.0.0.1", requests_per_second=2, burst=1, max_concurrency=100)
    services(**env(tmp_path)).start_all(worker_concurrency=10)
    tenant, _, _ = make_tenant()
    ids = [submit(tenant, target.url(f"/bytes/{100 + i}")).id for i in range(10)]
    wait_all_final(ids, timeout=60)

    assert_all_succeeded_at_the_first_attempt(ids)
    times = sorted(t for t, *_ in target.requests_for("/bytes/"))
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    print("arrival gaps:", [round(g, 2) for g in gaps])
    assert len(times) == 10
    # time is the subject: a rate of 2/s: arrivals at least 0.5 s apart, less 0.1 s of clock slack
    assert min(gaps) >= 0.5 - SLACK_S
    assert times[-1] - times[0] >= 9 * 0.5 - SLACK_S


def test_a_domain_capped_at_2_concurrent_requests_never_sees_a_third(services, make_tenant, target, tmp_path):
    """NFR-5 (politeness): six one-second requests to a domain capped at 2 in flight, over ten
    worker threads. Each request is in flight at the target from its arrival until at least 1 s
    later (the target sleeps before answering), so at every arrival at most one earlier request
    may be less than 1 s old."""
    DomainPolicy.objects.create(domain="127.0.0.1", requests_per_second=100, burst=100, max_concurrency=2)
    services(**env(tmp_path)).start_all(worker_concurrency=10)
    tenant, _, _ = make_tenant()
    ids = [submit(tenant, target.url(f"/slow?delay=1&n={i}")).id for i in range(6)]
    wait_all_final(ids, timeout=60)

    assert_all_succeeded_at_the_first_attempt(ids)
    arrivals = sorted(t for t, *_ in target.requests_for("/slow"))
    assert len(arrivals) == 6
    in_flight = [sum(1 for a in arrivals if a <= t < a + 1.0) for t in arrivals]
    print("in flight at each arrival:", in_flight)
    assert max(in_flight) == 2  # the cap is reached, never passed


def test_a_retry_after_pauses_its_own_domain_for_every_worker_while_other_domains_proceed(
    services, make_tenant, target, tmp_path
):
    """NFR-5 (politeness), NFR-5 ("a busy domain delays only its own jobs"): a 429 with
    Retry-After: 2 from 127.0.0.1 keeps every other 127.0.0.1 job away from the target for 2 s,
    while jobs to localhost (same server, another domain) run meanwhile, on a worker with only
    two threads: the waiting jobs hold none of them."""
    services(**env(tmp_path)).start_all(worker_concurrency=2)
    tenant, _, _ = make_tenant()
    throttled = submit(tenant, target.url("/retry-after/a?fail=1&after=2"))
    wait_for(
        lambda: target.requests_for("/retry-after/a") and domain_state_get(domain="127.0.0.1").cooldown_s > 0,
        timeout=30,
        what="the 429 and its cooldown",
    )
    t429 = target.requests_for("/retry-after/a")[0][0]
    same = [submit(tenant, target.url(f"/bytes/{200 + i}")).id for i in range(6)]
    other_base = target.base_url.replace("127.0.0.1", "localhost")
    other = [submit(tenant, f"{other_base}/bytes/{300 + i}").id for i in range(3)]
    wait_all_final([throttled.id, *same, *other], timeout=60)

    assert_all_succeeded_at_the_first_attempt(same + other)
    throttled.refresh_from_db()
    assert (throttled.status, throttled.attempts) == (JobStatus.SUCCEEDED, 2)
    same_times = [t for t, p, *_ in target.requests if p.startswith("/bytes/2")]
    other_times = [t for t, p, *_ in target.requests if p.startswith("/bytes/3")]
    retry_time = target.requests_for("/retry-after/a")[1][0]
    print(
        f"after the 429: same domain {[round(t - t429, 2) for t in sorted(same_times)]},"
        f" other domain {[round(t - t429, 2) for t in sorted(other_times)]}, retry {retry_time - t429:.2f}"
    )
    assert len(same_times) == 6 and len(other_times) == 3
    assert min([*same_times, retry_time]) >= t429 + 2.0
    assert max(other_times) < t429 + 2.0
