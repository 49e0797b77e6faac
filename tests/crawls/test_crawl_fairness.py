"""A crawl as the noisy neighbour (NFR-41, NFR-10): a crawl's pages take its tenant's share of the
pool like any job, so another tenant's jobs, in the same priority, start within NFR-10's bound
while the crawl's backlog drains. The approach of tests/e2e/test_noisy_neighbour.py: the seed's
small pool (eight worker slots), a local target that logs request times, a small steady flow from
the other tenant. Every target is on loopback."""

from __future__ import annotations

from collections import Counter

import pytest

from apps.crawls.models import Crawl
from apps.jobs.models import Job, JobStatus
from tests.e2e.fault_support import wait_all_final
from tests.e2e.test_noisy_neighbour import START_BOUND, _start, _steady, _unlimited, _waits
from tests.support.procs import wait_for

pytestmark = pytest.mark.e2e

SEEDS = 100  # the crawl's backlog from its first second: every seed is a queued page
MAX_PAGES = 500
SITE = 4000  # pages of the binary-tree site: far more than the limit


def test_a_crawl_of_500_pages_does_not_hold_up_another_tenants_jobs(
    services, make_tenant, api, target, tmp_path
):
    _unlimited("127.0.0.1")
    _start(services, tmp_path, SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S="0.3")
    shop, _, _ = make_tenant(name="shop")
    page = "/site/{n}?delay=0.25&n=" + str(SITE)  # eight slots at 0.25 s a page: about 32 pages/s
    r = api.post(
        "/api/v1/crawls",
        {
            "seeds": [target.url(page.format(n=n)) for n in range(SEEDS)],
            "max_pages": MAX_PAGES,
            "exclude": ["/private*"],
            "sitemaps": "skip",  # every job here is a page (the site has no sitemap)
        },
        format="json",
    )
    assert r.status_code == 202, r.content
    crawl_id = r.json()["id"]
    crawl_jobs = Job.objects.filter(batch_id=crawl_id)
    # The other tenant's flow starts once the crawl fills the pool and has a backlog behind it.
    wait_for(
        lambda: (
            crawl_jobs.filter(status=JobStatus.RUNNING).count() >= 4
            and crawl_jobs.filter(status=JobStatus.QUEUED).count() >= 50
        ),
        60,
        interval=0.1,
        what="the crawl to fill the pool",
    )
    shop_jobs: list[Job] = []
    _steady(shop, target.url("/bytes/256?delay=0.25"), every_s=0.5, n=12, into=shop_jobs).join()
    wait_all_final([j.id for j in shop_jobs], timeout=60, what="the shop's jobs")
    wait_for(
        lambda: Crawl.objects.get(id=crawl_id).status != "running", 180, interval=0.3, what="the crawl to end"
    )

    crawl = Crawl.objects.get(id=crawl_id)
    assert (crawl.status, crawl.pages) == ("completed", MAX_PAGES)
    assert Counter(crawl_jobs.values_list("status", flat=True)) == {JobStatus.SUCCEEDED: MAX_PAGES}
    assert Counter(Job.objects.filter(tenant=shop).values_list("status", flat=True)) == {
        JobStatus.SUCCEEDED: 12
    }
    waits = _waits(shop_jobs)
    print(
        f"\nshop beside a crawl: wait to first attempt p50 {waits[len(waits) // 2]:.2f} s max {waits[-1]:.2f} s"
    )
    assert waits[-1] <= START_BOUND.total_seconds(), waits
    # The shop's jobs ran while the crawl's backlog was still draining, not after it.
    shop_last = max(Job.objects.filter(tenant=shop).values_list("started_at", flat=True))
    assert shop_last < max(crawl_jobs.values_list("started_at", flat=True))
    # The crawl took the rest of the pool while the shop's flow was on.
    first = min(j.created_at for j in shop_jobs)
    window = Counter(
        Job.objects.filter(started_at__gte=first, started_at__lte=shop_last).values_list(
            "tenant_id", flat=True
        )
    )
    print(f"starts while both had work: crawl {window[crawl.tenant_id]}, shop {window[shop.id]}")
    assert window[crawl.tenant_id] > window[shop.id], window
