"""Crawls for operators (FR-46): the admin's list with counts, a crawl's page, the cancel action
(through crawl_cancel), the rollup's ended-crawl counter on /metrics and the dashboard's panel."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.crawls.models import Crawl
from apps.crawls.services import crawl_cancel, crawl_create
from apps.jobs.models import Job, JobStatus
from apps.operators.models import CrawlTotal
from apps.operators.rollup_runner import crawls_fold, rollup_run
from apps.tenants.models import Tenant
from apps.tenants.services import tenant_create
from tests.operators.test_admin import messages_of, staff_with
from tests.operators.test_metrics import scrape, value

pytestmark = pytest.mark.django_db

CRAWLS = "/admin/crawls/crawl/"


def make_crawl(tenant: Tenant, *seeds: str, max_pages: int = 5) -> Crawl:
    crawl, _ = crawl_create(
        tenant_id=tenant.id,
        seeds=list(seeds or ["https://shop.example/a", "https://shop.example/b"]),
        scope="same_origin",
        include=[],
        exclude=[],
        max_pages=max_pages,
        max_depth=3,
        job_options={},
        callback_url=None,
        idempotency_key=None,
        fingerprint="f",
    )
    return crawl


@pytest.fixture
def shop() -> Tenant:
    return tenant_create(name="shop").tenant


def test_the_crawl_list_shows_pages_of_max_and_the_discovery_counts(
    admin_client: Client, shop: Tenant
) -> None:
    crawl = make_crawl(shop)
    Crawl.objects.filter(id=crawl.id).update(discovered=17, skipped_out_of_scope=4)

    page = admin_client.get(CRAWLS).content.decode()

    assert str(crawl.id) in page and "2 / 5" in page
    assert ">17<" in page and ">4<" in page and "running" in page


def test_a_crawl_page_shows_its_pages_by_status_and_cannot_be_edited(
    admin_client: Client, shop: Tenant
) -> None:
    crawl = make_crawl(shop)
    Job.objects.filter(batch_id=crawl.id, url__endswith="/b").update(status=JobStatus.SUCCEEDED)

    r = admin_client.get(f"{CRAWLS}{crawl.id}/change/")

    assert r.status_code == 200
    body = r.content.decode()
    assert "&quot;queued&quot;: 1" in body and "&quot;succeeded&quot;: 1" in body
    assert 'name="_save"' not in body
    assert admin_client.get(f"{CRAWLS}add/").status_code == 403


def test_the_cancel_action_cancels_running_crawls_and_their_queued_pages(
    admin_client: Client, shop: Tenant
) -> None:
    running = make_crawl(shop)
    ended = make_crawl(shop, "https://shop.example/c")
    crawl_cancel(crawl=ended)

    r = admin_client.post(
        CRAWLS, {"action": "cancel_crawls", "_selected_action": [str(running.id), str(ended.id)]}, follow=True
    )

    assert r.status_code == 200
    assert any(
        "1 crawls cancelled (2 queued pages cancelled, 0 running" in m and "1 already ended" in m
        for m in messages_of(r)
    ), messages_of(r)
    assert Crawl.objects.get(id=running.id).status == "cancelled"
    assert set(Job.objects.filter(batch_id=running.id).values_list("status", flat=True)) == {"cancelled"}


def test_a_staff_member_who_may_only_view_crawls_cannot_cancel_them(client: Client, shop: Tenant) -> None:
    crawl = make_crawl(shop)
    staff = staff_with(client, "view_crawl")

    assert "cancel_crawls" not in staff.get(CRAWLS).content.decode()
    staff.post(CRAWLS, {"action": "cancel_crawls", "_selected_action": [str(crawl.id)]})

    assert Crawl.objects.get(id=crawl.id).status == "running"


def _ended(crawl: Crawl, status: str, ago_s: float) -> None:
    Crawl.objects.filter(id=crawl.id).update(
        status=status, finished_at=timezone.now() - timedelta(seconds=ago_s)
    )


def test_ended_crawls_are_counted_once_by_the_rollup_and_shown_on_metrics(shop: Tenant) -> None:
    done, cancelled, late = make_crawl(shop), make_crawl(shop), make_crawl(shop)
    make_crawl(shop)  # still running
    _ended(done, "completed", 120)
    _ended(cancelled, "cancelled", 120)
    _ended(late, "completed", 5)  # ended within the settle time: a later run counts it

    rollup_run()

    samples = scrape()
    assert value(samples, "scrapejobs_crawls_total", status="completed") == 1
    assert value(samples, "scrapejobs_crawls_total", status="cancelled") == 1
    assert value(samples, "scrapejobs_crawls_running") == 1

    assert crawls_fold(now=timezone.now() + timedelta(seconds=60)) == 1  # the late one, once
    assert crawls_fold(now=timezone.now() + timedelta(seconds=61)) == 0  # nothing counted twice
    assert dict(CrawlTotal.objects.values_list("status", "crawls")) == {"completed": 2, "cancelled": 1}
    assert value(scrape(), "scrapejobs_crawls_total", status="completed") == 2


def test_metrics_show_zero_crawls_before_any_ended() -> None:
    samples = scrape()

    assert value(samples, "scrapejobs_crawls_total", status="completed") == 0
    assert value(samples, "scrapejobs_crawls_running") == 0


def test_the_dashboard_shows_crawls_running_and_ended_with_the_running_ones_linked(
    admin_client: Client, shop: Tenant
) -> None:
    running = make_crawl(shop)
    _ended(make_crawl(shop), "cancelled", 120)
    rollup_run()

    r = admin_client.get("/admin/dashboard/")

    assert r.status_code == 200
    page = r.content.decode()
    assert "<dt>crawls running</dt><dd>1</dd>" in page
    assert "<dt>crawls cancelled</dt><dd>1</dd>" in page and "<dt>crawls completed</dt><dd>0</dd>" in page
    assert f'href="/admin/crawls/crawl/{running.id}/change/"' in page and "2 / 5" in page
