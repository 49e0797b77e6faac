"""Seed 002's steps 29 and 33, one after the other on one stack, where the sites and not the pool
are the bottleneck (NFR-9, NFR-10 at a domain's gate; docs/design/politeness.md, "The line at a
busy domain").

Eight worker slots (two workers of four threads), a broker kept eight messages deep, four sites
on loopback (127.0.0.11-14) that each take three requests a second, one at a time's worth of
burst: a crawler's backlog at every site, then a shop and an analyst. Asserted by the order in
which jobs start at each site, never by the clock: step 29 (all ``normal``), the three tenants
share each site's permits equally, within one job per round; step 33 right after it (the shop
``high``, the analyst ``low``), the shop's jobs start before the crawler's queued ones but for
the normal line's share (the weights 6:3:1: high takes six permits of ten), and the analyst gets
one permit in ten of each site while the crawler still has jobs for it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from django.utils import timezone

from apps.jobs.models import Job, JobStatus
from apps.politeness.models import DomainPolicy
from tests.e2e.fault_support import pool_of_eight, submit, wait_all_final
from tests.support.procs import wait_for
from tests.support.target import TargetServer, stop_servers

pytestmark = pytest.mark.e2e

SITES = [f"127.0.0.{i}" for i in (11, 12, 13, 14)]
RPS = 3  # each site's rate: four sites, 12 permits a second for a pool that could do 40
WEIGHTS = {"high": 6, "normal": 3, "low": 1}  # SCRAPEJOBS_PRIORITY_WEIGHTS' default
# What the order may be off by at a site: a permit granted while a newcomer was on its way from
# the publisher to the gate, and one granted to the job that was next when it came.
SLACK = 2


@pytest.fixture
def sites() -> Iterator[list[TargetServer]]:
    servers = [TargetServer(host=host).start() for host in SITES]
    yield servers
    stop_servers(servers)


def _burst(tenant: Any, sites: list[TargetServer], n: int, priority: str = "normal") -> list[Job]:
    """``n`` jobs to each site, interleaved, as a crawler's burst would be."""
    url = "/bytes/64?delay=0.2&n={i}"
    return [submit(tenant, site.url(url.format(i=i)), priority=priority) for i in range(n) for site in sites]


def _starts(site: str, since: datetime) -> list[str]:
    """The tenants of the jobs that started at ``site`` after ``since``, in the order they started."""
    rows = (
        Job.objects.filter(domain=site, started_at__gt=since)
        .order_by("started_at")
        .values_list("tenant__name", flat=True)
    )
    return list(rows)


def _started_at(site: str, tenant: str) -> int:
    return Job.objects.filter(domain=site, tenant__name=tenant, started_at__isnull=False).count()


def _all_succeeded(jobs: list[Job]) -> None:
    statuses = Counter(Job.objects.filter(id__in=[j.id for j in jobs]).values_list("status", flat=True))
    assert statuses == {JobStatus.SUCCEEDED: len(jobs)}, statuses


def test_priorities_and_tenant_shares_hold_at_each_sites_gate(services, make_tenant, sites, tmp_path):
    for host in SITES:
        DomainPolicy.objects.create(domain=host, requests_per_second=RPS, burst=1, max_concurrency=8)
    crawler, _, _ = make_tenant(name="crawler")
    shop, _, _ = make_tenant(name="shop")
    analyst, _, _ = make_tenant(name="analyst")
    pool_of_eight(services, tmp_path, SCRAPEJOBS_DISPATCH_DEPTH="8", SCRAPEJOBS_PUBLISH_INTERVAL_S="0.25")

    # Step 29: the crawler's burst, then (once each site's line has formed) the shop and the
    # analyst in the same priority.
    crawl = _burst(crawler, sites, 20)
    wait_for(lambda: all(_started_at(host, "crawler") >= 2 for host in SITES), 60, what="the crawl started")
    step29 = timezone.now()
    small = _burst(shop, sites, 5) + _burst(analyst, sites, 5)
    wait_all_final([j.id for j in small], timeout=120, what="step 29's shop and analyst")
    for host in SITES:
        order = _starts(host, step29)
        theirs = [i for i, name in enumerate(order) if name != "crawler"]
        window = order[theirs[0] : theirs[-1] + 1]
        print(f"step 29 at {host}: {' '.join(name[0] for name in order)}")
        seen: Counter[str] = Counter()
        for name in window:  # every prefix: the three shares within one job per round (+ slack)
            seen[name] += 1
            counts = [seen[t] for t in ("crawler", "shop", "analyst")]
            assert max(counts) - min(counts) <= 1 + SLACK, (host, order)
        assert Counter(window)["crawler"] <= 5 + 1 + SLACK, (host, order)  # not the crawler's backlog first

    # Step 33 right after it, the sites' lines still long: more of the crawl, then the shop in
    # high and the analyst in low.
    crawl += _burst(crawler, sites, 20)
    wait_for(
        lambda: (
            Job.objects.filter(tenant=crawler, published_at__isnull=False).count()
            + Job.objects.filter(tenant=crawler, defer_reason__isnull=False, status=JobStatus.QUEUED).count()
            >= 40
        ),
        60,
        what="the crawl's new jobs at the gates",
    )
    step33 = timezone.now()
    urgent = _burst(shop, sites, 6, priority="high")
    nightly = _burst(analyst, sites, 4, priority="low")
    wait_all_final([j.id for j in urgent + nightly], timeout=180, what="step 33's shop and analyst")
    wait_all_final([j.id for j in crawl], timeout=180, what="the crawl")
    _all_succeeded(crawl + small + urgent + nightly)

    normal_share = math.ceil(6 * WEIGHTS["normal"] / WEIGHTS["high"])  # 3 permits to normal for 6 to high
    for host in SITES:
        order = _starts(host, step33)
        print(f"step 33 at {host}: {' '.join(name[0] for name in order)}")
        last_shop = max(i for i, name in enumerate(order) if name == "shop")
        assert order[: last_shop + 1].count("shop") == 6
        # The shop did not wait for the crawler's queue: only the normal line's share went first.
        assert order[:last_shop].count("crawler") <= normal_share + SLACK, (host, order)
        # The analyst: one permit in ten while the others wait (more once high is served), and
        # all of its jobs long before the crawler's backlog at this site is through.
        last_analyst = max(i for i, name in enumerate(order) if name == "analyst")
        gaps, run = [], 0
        for name in order[: last_analyst + 1]:
            if name == "analyst":
                gaps.append(run)
                run = 0
            else:
                run += 1
        assert len(gaps) == 4 and max(gaps) <= 9 + SLACK, (host, gaps, order)
        assert "crawler" in order[last_analyst + 1 :], (host, order)
