"""Cross-tenant sharing of fetches is switched on per tenant by an operator, in the admin, and is
off for a tenant made anywhere else."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.jobs.models import Attempt
from apps.tenants.models import Tenant

pytestmark = pytest.mark.django_db


def _operator() -> Client:
    browser = Client()
    browser.force_login(get_user_model().objects.create_superuser("root", "root@example.test", "pw"))
    return browser


def test_an_operator_switches_fetch_sharing_on_for_a_tenant(make_tenant):
    tenant, _, _ = make_tenant(name="shop")
    assert tenant.share_fetches is False  # off by default
    browser = _operator()
    page = browser.get(f"/admin/tenants/tenant/{tenant.pk}/change/")
    assert b'name="share_fetches"' in page.content
    r = browser.post(
        f"/admin/tenants/tenant/{tenant.pk}/change/",
        {"name": "shop", "rate_limit_per_second": "", "is_active": "on", "share_fetches": "on", "weight": "1",
         "obey_robots": "on",
         "tokens-TOTAL_FORMS": "0", "tokens-INITIAL_FORMS": "0"},
    )  # fmt: skip
    assert r.status_code == 302, r.content[:2000]
    assert Tenant.objects.get(pk=tenant.pk).share_fetches is True


def test_a_tenant_created_in_the_admin_keeps_its_sharing_choice():
    browser = _operator()
    r = browser.post(
        "/admin/tenants/tenant/add/",
        {"name": "sharer", "rate_limit_per_second": "", "is_active": "on", "share_fetches": "on", "weight": "1",
         "obey_robots": "on",
         "tokens-TOTAL_FORMS": "0", "tokens-INITIAL_FORMS": "0"},
    )  # fmt: skip
    assert r.status_code == 302, r.content[:2000]
    assert Tenant.objects.get(name="sharer").share_fetches is True


def test_the_attempt_admin_shows_where_a_served_attempt_came_from(make_tenant):
    from apps.jobs.intake import job_create

    tenant, _, _ = make_tenant()
    job, _ = job_create(tenant_id=tenant.id, url="http://a.example/", domain="a.example")
    source, _ = job_create(tenant_id=tenant.id, url="http://a.example/", domain="a.example")
    attempt = Attempt.objects.create(
        job=job, number=1, started_at=job.created_at, served_from_job=source.id, served_from_attempt=2
    )
    page = _operator().get(f"/admin/jobs/attempt/{attempt.pk}/change/")
    assert str(source.id).encode() in page.content and b"Served from attempt" in page.content
