"""Beat's ``crawls-expand`` run (apps/crawls/expansion.py ``crawls_expand``): round after round of
``limit`` pages while time is left, and a crawl another run holds (its lease in Redis) left to
that run (docs/benchmarks.md, crawl: overlapping runs read the same pages in the same order)."""

from __future__ import annotations

import pytest

from apps.crawls import expansion
from apps.crawls.models import Crawl, CrawlPage
from apps.jobs.models import Job
from apps.redis_clients import state_redis
from tests.crawls.test_crawl_discovery import START, _crawl, _job, _page, _succeed


@pytest.fixture(autouse=True)
def _results_here(local_results):
    return local_results


@pytest.mark.django_db
def test_one_run_expands_every_ended_page_in_rounds_of_limit_and_ends_the_crawl(api):
    crawl_id = _crawl(api, max_pages=20)
    _succeed(_job(crawl_id, START), _page([f"/a/{n}" for n in range(7)]))
    assert expansion.crawls_expand(limit=2) == 1
    for job in Job.objects.filter(batch_id=crawl_id).exclude(url=START):
        _succeed(job, _page([]))

    # Seven ended pages, two a round: four rounds in one run (one round of two before).
    assert expansion.crawls_expand(limit=2) == 7

    crawl = Crawl.objects.get(id=crawl_id)
    assert (crawl.status, crawl.pages) == ("completed", 8)
    assert not CrawlPage.objects.filter(crawl_id=crawl_id, expanded_at__isnull=True).exists()


@pytest.mark.django_db
def test_a_crawl_another_run_holds_is_left_to_it_and_a_run_lets_its_lease_go(api):
    crawl_id = _crawl(api, max_pages=20)
    _succeed(_job(crawl_id, START), _page(["/a", "/b"]))
    lease = f"crawl-expand:{crawl_id}"
    state_redis().set(lease, "another-run", ex=30)

    assert expansion.crawls_expand() == 0
    assert CrawlPage.objects.get(crawl_id=crawl_id, seq=1).expanded_at is None

    state_redis().delete(lease)
    assert expansion.crawls_expand() == 1
    assert Crawl.objects.get(id=crawl_id).pages == 3
    assert state_redis().get(lease) is None  # released at the end of the run
