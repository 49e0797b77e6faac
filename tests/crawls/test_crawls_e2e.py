"""Crawls through the real processes (FR-39 to FR-41, docs/crawls.md): POST /crawls over HTTP, the
worker fetches each page from a local linked site (tests/support/target.py's ``/site``), beat's
``crawls-expand`` in the control process reads their links and adds pages, the crawl ends (and
calls its callback) or is cancelled. Every target is on loopback."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from apps.crawls import expansion as crawl_expansion
from apps.crawls.models import Crawl
from apps.jobs.models import Job
from apps.webhooks.models import WebhookDelivery
from tests.support.procs import wait_for

pytestmark = pytest.mark.e2e

FINAL = ("succeeded", "failed", "cancelled")


def _crawl(api, target, start: str = "/site/0", **body) -> dict:
    # No sitemap unless a test asks: the tests count the target's requests for pages.
    body.setdefault("sitemaps", "skip")
    r = api.post("/api/v1/crawls", {"seeds": [target.url(start)], **body}, format="json")
    assert r.status_code == 202, r.content
    return r.json()


def _state(api, crawl_id: str) -> dict:
    r = api.get(f"/api/v1/crawls/{crawl_id}")
    assert r.status_code == 200, r.content
    return r.json()


def _site_fetches(target) -> Counter:
    return Counter(path for _, path, method, _, _ in target.requests_for("/") if path != "/robots.txt")


def test_a_crawl_of_a_31_page_site_with_max_pages_10_fetches_exactly_10_pages_once_and_calls_back(
    services, api, target
):
    services(SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S="0.3").start_all(worker_concurrency=10)
    crawl = _crawl(
        api, target, max_pages=10, max_depth=10, callback_url=target.url("/echo"), job={"max_attempts": 1}
    )

    wait_for(
        lambda: _state(api, crawl["id"])["status"] != "running", 120, interval=0.3, what="the crawl to end"
    )

    state = _state(api, crawl["id"])
    assert state["status"] == "completed" and state["finished_at"] is not None
    assert state["pages"] == {
        "total": 10,
        "queued": 0,
        "running": 0,
        "succeeded": 10,
        "failed": 0,
        "cancelled": 0,
        "erased": 0,
    }
    assert state["discovery"]["over_limit"] > 0  # the site has far more pages than the limit
    assert Job.objects.filter(batch_id=crawl["id"]).count() == 10
    fetched = _site_fetches(target)
    assert sum(n for path, n in fetched.items() if path != "/echo") == 10  # each page once
    assert all(n == 1 for path, n in fetched.items() if path != "/echo")
    jobs = api.get(f"/api/v1/jobs?crawl={crawl['id']}&limit=50").json()["items"]
    assert len(jobs) == 10 and {j["status"] for j in jobs} == {"succeeded"}
    # The crawl's own callback: one delivery, crawl.completed, with its counts.
    wait_for(lambda: target.requests_for("/echo"), 60, interval=0.2, what="the crawl's callback")
    delivery = WebhookDelivery.objects.get(batch_id=crawl["id"])
    body = json.loads(delivery.body)
    assert (delivery.event, body["type"], body["status"], body["pages"]["succeeded"]) == (
        "crawl.completed",
        "crawl.completed",
        "completed",
        10,
    )


def test_depth_scope_exclude_and_dedupe_decide_which_pages_are_fetched(services, api, target):
    services(SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S="0.3").start_all(worker_concurrency=10)
    crawl = _crawl(api, target, max_pages=100, max_depth=2, exclude=["/private*"])

    wait_for(
        lambda: _state(api, crawl["id"])["status"] != "running", 120, interval=0.3, what="the crawl to end"
    )

    state = _state(api, crawl["id"])
    assert state["status"] == "completed"
    # Depth 0..2 of the binary tree: pages 0..6, each fetched once; /site/0#top is page 0 again,
    # /private/* excluded, the other host and mailto: never pages.
    assert _site_fetches(target) == Counter({f"/site/{n}": 1 for n in range(7)})
    assert state["pages"]["total"] == 7 and state["pages"]["succeeded"] == 7
    pages = api.get(f"/api/v1/crawls/{crawl['id']}/pages").json()["items"]
    assert [(p["url"].rsplit("/", 2)[-2:], p["depth"]) for p in pages][:3] == [
        (["site", "0"], 0),
        (["site", "1"], 1),
        (["site", "2"], 1),
    ]
    # Pages 0..2 (depth < 2) were read: 5 distinct links each (/site/0#top is /site/0; page 0
    # links to itself), 3 of them out of scope (/private, another host) on every page.
    assert state["discovery"]["out_of_scope"] == 3 * 2
    assert state["discovery"]["duplicate"] == 3  # /site/0 on each of the three pages


def test_cancel_stops_a_crawl(services, api, target):
    services(SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S="0.3").start_all(worker_concurrency=1)
    # Every page takes 2 s to answer (its links keep the delay) and one page is fetched at a
    # time, so when the start page's two links are jobs, one is running and one still queued.
    crawl = _crawl(api, target, "/site/0?delay=2", max_pages=31, max_depth=10, exclude=["/private*"])
    crawl_id = crawl["id"]
    wait_for(lambda: _state(api, crawl_id)["pages"]["total"] >= 3, 60, interval=0.2, what="pages to be found")

    r = api.post(f"/api/v1/crawls/{crawl_id}/cancel")

    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    taken = Crawl.objects.get(id=crawl_id).pages
    assert taken < 31
    wait_for(
        lambda: set(Job.objects.filter(batch_id=crawl_id).values_list("status", flat=True)) <= set(FINAL),
        60,
        interval=0.3,
        what="every job of the crawl to end",
    )
    crawl_expansion.crawls_expand()  # an expansion after the cancel adds nothing
    assert Job.objects.filter(batch_id=crawl_id).count() == taken
    assert Job.objects.filter(batch_id=crawl_id, status="cancelled").exists()
    assert _state(api, crawl_id)["status"] == "cancelled"


def test_a_link_robots_txt_disallows_is_refused_at_discovery_and_spends_no_page(services, api, target):
    services(SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S="0.3", SCRAPEJOBS_ROBOTS_OBEY="true").start_all(
        worker_concurrency=10
    )
    target.robots = (200, "User-agent: *\nDisallow: /site/2\n")
    # Fetching the start page caches the rules; page 2 (and so 5 and 6 below it) is never a job.
    crawl = _crawl(api, target, max_pages=100, max_depth=2, exclude=["/private*"])

    wait_for(
        lambda: _state(api, crawl["id"])["status"] != "running", 120, interval=0.3, what="the crawl to end"
    )

    state = _state(api, crawl["id"])
    assert _site_fetches(target) == Counter({f"/site/{n}": 1 for n in (0, 1, 3, 4)})
    assert state["pages"]["total"] == 4 and state["pages"]["succeeded"] == 4
    assert state["discovery"]["disallowed"] == 1


def test_a_sitemap_index_named_by_robots_txt_with_a_gzipped_sitemap_adds_its_pages(services, api, target):
    services(SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S="0.3", SCRAPEJOBS_ROBOTS_OBEY="true").start_all(
        worker_concurrency=10
    )
    ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    target.robots = (200, f"User-agent: *\nAllow: /\nSitemap: {target.url('/maps/index.xml')}\n")
    target.files["/maps/index.xml"] = (
        "application/xml",
        f"<sitemapindex {ns}><sitemap><loc>{target.url('/maps/pages.xml.gz')}</loc></sitemap></sitemapindex>".encode(),
    )
    locs = "".join(f"<url><loc>{target.url(f'/site/{n}')}</loc></url>" for n in (20, 21, 22))
    target.files["/maps/pages.xml.gz"] = (
        "application/gzip",
        gzip.compress(f"<urlset {ns}>{locs}</urlset>".encode()),
    )
    # sitemaps "only": the seed, then exactly the sitemap's three pages, no link of any page followed.
    crawl = _crawl(api, target, max_pages=100, max_depth=3, sitemaps="only")

    wait_for(
        lambda: _state(api, crawl["id"])["status"] != "running", 120, interval=0.3, what="the crawl to end"
    )

    state = _state(api, crawl["id"])
    assert state["status"] == "completed"
    fetched = _site_fetches(target)
    assert fetched == Counter(
        {
            "/site/0": 1,
            "/site/20": 1,
            "/site/21": 1,
            "/site/22": 1,
            "/maps/index.xml": 1,
            "/maps/pages.xml.gz": 1,
            "/sitemap.xml": 1,
        }
    )
    assert state["pages"]["total"] == 4 and state["pages"]["succeeded"] == 4  # sitemaps apart
    assert state["discovery"]["sitemaps"] == 3  # the index, its gzipped sitemap, /sitemap.xml (404)
