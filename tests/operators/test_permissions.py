"""A staff member who may only view is refused every change the admin offers.

The tests walk the admin site itself: every registered ModelAdmin, every action it has, and every
URL it adds to Django's standard ones. A new action or custom view is covered the day it is
registered, and the test names it when it lets a viewer through. "Refused" means nothing changed:
every row of every registered model, the jobs ledger and the writer's dead receipts read the same
before and after.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group, Permission, User
from django.db import models
from django.test import Client, RequestFactory
from django.urls import URLPattern
from django.utils import timezone

from apps.batches.models import Batch
from apps.crawls.models import Crawl
from apps.jobs.claims import job_claim
from apps.jobs.intake import job_create
from apps.jobs.models import Attempt, Job, JobStatus
from apps.politeness.models import DomainPolicy
from apps.tenants.services import tenant_create
from apps.webhooks.models import DisabledCallback, WebhookDelivery
from apps.writer.streams import DEAD_RECEIPTS, writer_redis

pytestmark = pytest.mark.django_db

# Django's own pages of every ModelAdmin; anything else a ModelAdmin's get_urls() adds is custom.
STANDARD_URL_SUFFIXES = ("_changelist", "_add", "_history", "_delete", "_change")


def rows_for_every_admin() -> None:
    """One row for each registered model, so that every action has something to act on."""
    tenant = tenant_create(name="shop").tenant
    queued, _ = job_create(tenant_id=tenant.pk, url="https://shop.example/q", domain="shop.example")
    failed, _ = job_create(tenant_id=tenant.pk, url="https://shop.example/f", domain="shop.example")
    running, _ = job_create(tenant_id=tenant.pk, url="https://shop.example/r", domain="shop.example")
    job_claim(job_id=running.id, worker="w")
    Job.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED, finished_at=timezone.now())
    delivery = WebhookDelivery.objects.create(
        job=failed, event="failed", url="https://hooks.example/", body="{}", created_at=timezone.now()
    )
    DisabledCallback.objects.create(
        tenant=tenant,
        url="https://hooks.example/",
        url_sha256=hashlib.sha256(b"https://hooks.example/").hexdigest(),
        disabled_at=timezone.now(),
        delivery=delivery,
    )
    DomainPolicy.objects.create(domain="shop.example", requests_per_second=1, burst=1, max_concurrency=1)
    writer_redis().xadd(DEAD_RECEIPTS, {"receipt": "not a receipt"})
    Group.objects.create(name="operators")
    User.objects.create_user("someone", password="x")
    Batch.objects.create(tenant=tenant, format="json", total=1)
    Crawl.objects.create(tenant=tenant, seeds=["https://shop.example/"], max_pages=5, max_depth=1)


def viewer(client: Client) -> Client:
    """A staff member holding every view permission and nothing else."""
    user = User.objects.create_user("viewer", password="x", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__startswith="view_"))
    client.force_login(user)
    return client


def everything() -> dict[str, Any]:
    """Every row the admin can reach, and the writer's dead receipts."""
    tables: dict[str, Any] = {}
    registered: set[type[models.Model]] = {*admin.site._registry, Job, Attempt}
    for model in registered:
        if model._meta.managed and not model._meta.proxy:
            tables[model._meta.label] = sorted(map(repr, model._default_manager.values()))
    tables["dead receipts"] = writer_redis().xlen(DEAD_RECEIPTS)
    return tables


def admins() -> list[tuple[type[models.Model], admin.ModelAdmin[Any]]]:
    return list(admin.site._registry.items())


def changelist_url(model: type[models.Model]) -> str:
    return f"/admin/{model._meta.app_label}/{model._meta.model_name}/"


def custom_urls(model_admin: admin.ModelAdmin[Any]) -> list[URLPattern]:
    urls = [u for u in model_admin.get_urls() if isinstance(u, URLPattern) and u.name]
    return [u for u in urls if not str(u.name).endswith(STANDARD_URL_SUFFIXES)]


def some_pk(model: type[models.Model]) -> str:
    if not model._meta.managed:
        return writer_redis().xrange(DEAD_RECEIPTS, count=1)[0][0]  # the writer's: a stream id
    row = model._default_manager.order_by("pk").first()
    assert row is not None, model
    return str(row.pk)


def test_every_registered_model_has_a_row_to_act_on() -> None:
    rows_for_every_admin()
    empty = [m._meta.label for m, _ in admins() if m._meta.managed and not m._default_manager.exists()]
    assert empty == [], f"add a row for {empty} to rows_for_every_admin()"


def superuser_request() -> Any:
    """A request of a superuser: every action an admin has is offered to it."""
    request = RequestFactory().get("/admin/")
    request.user = User(is_superuser=True, is_staff=True, is_active=True)
    return request


def test_every_action_that_changes_something_asks_for_the_change_or_delete_permission() -> None:
    request = superuser_request()
    unguarded = []
    for model, model_admin in admins():
        for name, entry in model_admin.get_actions(request).items():
            wanted = set(getattr(entry[0] if entry else None, "allowed_permissions", ()))
            if not wanted & {"change", "delete"}:
                unguarded.append(f"{model._meta.label}.{name}")
    assert unguarded == []


def test_a_viewer_is_refused_every_action_of_every_admin(client: Client) -> None:
    rows_for_every_admin()
    request = superuser_request()
    viewer(client)
    before = everything()
    tried = []
    for model, model_admin in admins():
        for name in model_admin.get_actions(request):
            response = client.post(
                changelist_url(model),
                {
                    "action": name,
                    "_selected_action": [some_pk(model)],
                    "ids": [some_pk(model)],
                    "scope": "all",
                },
            )
            assert response.status_code in (200, 302, 403), (model, name, response.status_code)
            tried.append(f"{model._meta.model_name}.{name}")
    # The writer's page takes its actions as a POST of its own (replay / drop, all).
    for action in ("replay", "drop"):
        response = client.post("/admin/writer/writerdeadletter/", {"action": action, "scope": "all"})
        assert response.status_code == 403
    assert everything() == before
    # The walk saw the actions this suite knows of (a guard against a walk that finds nothing).
    assert {"job.cancel_jobs", "job.requeue_jobs", "deadletter.requeue", "deadletter.discard"} <= set(tried)
    assert {"webhookdelivery.redeliver", "apitoken.revoke", "tenant.create_token"} <= set(tried)


def test_a_viewer_is_refused_every_post_to_every_admin_url(client: Client) -> None:
    rows_for_every_admin()
    viewer(client)
    before = everything()
    refused = []
    for model, model_admin in admins():
        base = changelist_url(model)
        pk = some_pk(model)
        posts = [f"{base}add/"]
        if model._meta.managed:  # the writer's dead receipts live in Redis: no object pages
            posts += [f"{base}{pk}/change/", f"{base}{pk}/delete/"]
        for pattern in custom_urls(model_admin):
            posts.append(base + str(pattern.pattern).replace("<path:object_id>", pk))
        for url in posts:
            for action in ("requeue", "discard", "redeliver", "drop", "replay"):
                status = client.post(
                    url, {"action": action, "domain": "shop.example", "error_class": "(none)"}
                )
                assert status.status_code == 403, (url, action, status.status_code)
            refused.append(url)
    assert everything() == before
    assert "/admin/scheduling/deadletter/grouped/" in refused


def test_a_viewer_sees_no_action_button_on_any_admin_page(client: Client) -> None:
    rows_for_every_admin()
    viewer(client)
    for model, _ in admins():
        html = client.get(changelist_url(model), {"q": ""}).content.decode()
        assert 'name="action"' not in html, model._meta.label
    grouped = client.get("/admin/scheduling/deadletter/").content.decode()
    assert "Requeue all" not in grouped and "Discard all" not in grouped
