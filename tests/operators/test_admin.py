"""The operators' admin (FR-9), through the Django test client as a superuser."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import timezone

from apps.jobs.claims import job_claim
from apps.jobs.models import Attempt, Job, JobStatus
from apps.redis_clients import cancel_flag_key, state_redis
from apps.tenants.models import ApiToken, Tenant
from apps.tenants.services import tenant_create, token_authenticate, token_hash
from tests.support.factories import job_make

pytestmark = pytest.mark.django_db

JOBS = "/admin/jobs/job/"
TENANTS = "/admin/tenants/tenant/"


def make_job(tenant: Tenant, url: str = "https://shop.example/p/1", **kw: Any) -> Job:
    return job_make(tenant, url, **kw)


def ids_on_page(html: str) -> set[str]:
    return set(re.findall(r'name="_selected_action" value="([0-9a-f-]{36})"', html))


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def shop() -> Tenant:
    return tenant_create(name="shop").tenant


@pytest.fixture
def analyst() -> Tenant:
    return tenant_create(name="analyst").tenant


def test_the_job_list_shows_tenant_domain_status_and_attempts_of_max(
    admin_client: Client, shop: Tenant
) -> None:
    job = make_job(shop, max_attempts=7)
    html = admin_client.get(JOBS).content.decode()
    assert str(job.id) in html
    assert "shop.example" in html and "queued" in html and "0/7" in html and "shop" in html


def test_the_job_list_filters_by_state_tenant_domain_and_priority(
    admin_client: Client, shop: Tenant, analyst: Tenant
) -> None:
    a = make_job(shop, "https://a.example/1", priority="high")
    b = make_job(shop, "https://b.example/1", priority="low")
    c = make_job(analyst, "https://a.example/2")
    Job.objects.filter(pk=b.pk).update(status=JobStatus.FAILED)

    def listed(query: str) -> set[str]:
        response = admin_client.get(JOBS + query)
        assert response.status_code == 200
        return ids_on_page(response.content.decode())

    assert listed("") == {str(a.id), str(b.id), str(c.id)}
    assert listed("?status__exact=failed") == {str(b.id)}
    assert listed(f"?tenant__id__exact={analyst.pk}") == {str(c.id)}
    assert listed("?domain=a.example") == {str(a.id), str(c.id)}
    assert listed("?priority__exact=high") == {str(a.id)}
    assert listed("?priority__exact=normal&domain=a.example") == {str(c.id)}


def test_the_domain_filter_offers_the_busiest_domains(admin_client: Client, shop: Tenant) -> None:
    for i in range(3):
        make_job(shop, f"https://busy.example/{i}")
    make_job(shop, "https://quiet.example/1")
    html = admin_client.get(JOBS).content.decode()
    assert "busy.example (3)" in html and "quiet.example (1)" in html


def test_searching_finds_a_job_by_its_id_or_by_part_of_its_url(admin_client: Client, shop: Tenant) -> None:
    a = make_job(shop, "https://shop.example/products/red-shoes")
    b = make_job(shop, "https://shop.example/products/blue-hat")
    assert ids_on_page(admin_client.get(JOBS, {"q": str(a.id)}).content.decode()) == {str(a.id)}
    assert ids_on_page(admin_client.get(JOBS, {"q": "blue-hat"}).content.decode()) == {str(b.id)}
    assert ids_on_page(admin_client.get(JOBS, {"q": "no-such-thing"}).content.decode()) == set()


def test_the_cancel_action_cancels_a_queued_job_and_asks_a_running_one_to_stop(
    admin_client: Client, shop: Tenant
) -> None:
    queued = make_job(shop, "https://shop.example/q")
    running = make_job(shop, "https://shop.example/r")
    done = make_job(shop, "https://shop.example/d")
    assert job_claim(job_id=running.id, worker="w1") is not None
    Job.objects.filter(pk=done.pk).update(status=JobStatus.SUCCEEDED)

    response = admin_client.post(
        JOBS,
        {"action": "cancel_jobs", "_selected_action": [str(queued.id), str(running.id), str(done.id)]},
        follow=True,
    )
    assert response.status_code == 200
    assert any("1 cancelled, 1 running" in m and "1 already final" in m for m in messages_of(response))
    queued.refresh_from_db()
    running.refresh_from_db()
    done.refresh_from_db()
    assert queued.status == JobStatus.CANCELLED
    assert running.status == JobStatus.RUNNING and running.cancel_requested_at is not None
    assert state_redis().get(cancel_flag_key(str(running.id), 1)) == "1"
    assert done.status == JobStatus.SUCCEEDED


def test_the_requeue_action_requeues_failed_and_cancelled_jobs_with_a_fresh_budget(
    admin_client: Client, shop: Tenant
) -> None:
    failed = make_job(shop, "https://shop.example/f", max_attempts=2)
    for _ in range(2):
        claimed = job_claim(job_id=failed.id, worker="w1")
        assert claimed is not None
        Job.objects.filter(pk=failed.pk).update(status=JobStatus.QUEUED)
    Job.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED)
    queued = make_job(shop, "https://shop.example/q")

    response = admin_client.post(
        JOBS, {"action": "requeue_jobs", "_selected_action": [str(failed.id), str(queued.id)]}, follow=True
    )
    assert any("1 requeued; 1 were not failed" in m for m in messages_of(response))
    failed.refresh_from_db()
    assert failed.status == JobStatus.QUEUED and failed.published_at is None
    assert (failed.attempts, failed.max_attempts) == (2, 4)
    assert Attempt.objects.filter(job=failed).count() == 2  # the history stays


def test_a_job_page_shows_its_attempts_and_cannot_be_edited(admin_client: Client, shop: Tenant) -> None:
    job = make_job(shop)
    job_claim(job_id=job.id, worker="worker-7@host")
    page = admin_client.get(f"{JOBS}{job.id}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "worker-7@host" in html  # the attempt inline
    assert 'name="url"' not in html and 'name="_save"' not in html

    admin_client.post(f"{JOBS}{job.id}/change/", {"url": "https://evil.example/", "status": "succeeded"})
    job.refresh_from_db()
    assert job.url == "https://shop.example/p/1" and job.status == JobStatus.RUNNING


def test_jobs_and_attempts_cannot_be_added_or_deleted_in_the_admin(
    admin_client: Client, shop: Tenant
) -> None:
    job = make_job(shop)
    assert admin_client.get(f"{JOBS}add/").status_code == 403
    assert admin_client.get(f"{JOBS}{job.id}/delete/").status_code == 403
    assert admin_client.get("/admin/jobs/attempt/add/").status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()


def test_the_attempt_list_finds_the_attempts_of_one_job(admin_client: Client, shop: Tenant) -> None:
    a, b = make_job(shop, "https://shop.example/a"), make_job(shop, "https://shop.example/b")
    job_claim(job_id=a.id, worker="wa")
    job_claim(job_id=b.id, worker="wb")
    html = admin_client.get("/admin/jobs/attempt/", {"q": str(a.id)}).content.decode()
    assert "wa" in html and ">wb<" not in html


def test_adding_a_tenant_shows_its_token_once_and_stores_only_its_hash(admin_client: Client) -> None:
    response = admin_client.post(
        f"{TENANTS}add/",
        {
            "name": "newco",
            "rate_limit_per_second": "7",
            "weight": "1",
            "is_active": "on",
            "tokens-TOTAL_FORMS": "0",
            "tokens-INITIAL_FORMS": "0",
        },
        follow=True,
    )
    assert response.status_code == 200
    shown = " ".join(messages_of(response))
    token = re.search(r"token: (sj_\S+)", shown)
    secret = re.search(r"webhook_secret: (whsec_\S+)", shown)
    assert token and secret, shown
    tenant = Tenant.objects.get(name="newco")
    assert tenant.rate_limit_per_second == 7 and tenant.webhook_secret == secret.group(1)
    stored = ApiToken.objects.get(tenant=tenant)
    assert stored.token_hash == token_hash(token.group(1)) and token.group(1) not in stored.token_hash
    assert token_authenticate(raw=token.group(1)) is not None
    # Shown once: the tenant's page never contains the token again.
    page = admin_client.get(f"{TENANTS}{tenant.pk}/change/").content.decode()
    assert token.group(1) not in page and secret.group(1) not in page
    assert stored.prefix in page


def test_the_new_token_action_shows_a_token_that_works_for_that_tenant(
    admin_client: Client, shop: Tenant
) -> None:
    response = admin_client.post(
        TENANTS, {"action": "create_token", "_selected_action": [str(shop.pk)]}, follow=True
    )
    found = re.search(r"(sj_\S+)", " ".join(messages_of(response)))
    assert found
    authenticated = token_authenticate(raw=found.group(1))
    assert authenticated is not None and authenticated[0].pk == shop.pk
    assert shop.tokens.count() == 2


def test_tokens_are_shown_read_only_on_the_tenant_page(admin_client: Client, shop: Tenant) -> None:
    html = admin_client.get(f"{TENANTS}{shop.pk}/change/").content.decode()
    assert shop.tokens.get().prefix in html
    assert 'name="tokens-0-name"' not in html  # no editable token fields
    assert 'name="webhook_secret"' not in html


def test_a_staff_member_who_may_only_view_jobs_cannot_cancel_them(client: Client, shop: Tenant) -> None:
    from django.contrib.auth.models import Permission, User

    viewer = User.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(viewer)
    job = make_job(shop)
    assert client.get(JOBS).status_code == 200
    client.post(JOBS, {"action": "cancel_jobs", "_selected_action": [str(job.id)]})
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED


def test_tenants_are_found_by_name_or_by_id(admin_client: Client, shop: Tenant, analyst: Tenant) -> None:
    by_name = admin_client.get(TENANTS, {"q": "sho"})
    assert by_name.status_code == 200
    assert str(shop.pk) in by_name.content.decode() and str(analyst.pk) not in by_name.content.decode()
    by_id = admin_client.get(TENANTS, {"q": str(analyst.pk)}).content.decode()
    assert str(analyst.pk) in by_id and str(shop.pk) not in by_id


# --- Read-only pages, actions for the change permission (apps/admin_mixins.py) -------------


def staff_with(client: Client, *codenames: str, username: str = "staff") -> Client:
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(username, password="x", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return client


def failed(job: Job) -> Job:
    Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, finished_at=timezone.now())
    return job


def webhook_delivery(job: Job) -> Any:
    from apps.webhooks.models import WebhookDelivery

    return WebhookDelivery.objects.create(
        job=job, event="failed", url="https://hooks.example/", body="{}", created_at=timezone.now()
    )


# The read-only admins with actions: changelist, model (its permission codenames), its actions, a row.
READ_ONLY_ADMINS = [
    pytest.param(JOBS, "job", ("cancel_jobs", "requeue_jobs"), make_job, id="jobs"),
    pytest.param(
        "/admin/scheduling/deadletter/",
        "deadletter",
        ("requeue", "discard"),
        lambda t: failed(make_job(t)),
        id="dead-letters",
    ),
    pytest.param(
        "/admin/webhooks/webhookdelivery/",
        "webhookdelivery",
        ("redeliver",),
        lambda t: webhook_delivery(make_job(t)),
        id="webhook-deliveries",
    ),
    pytest.param("/admin/tenants/apitoken/", "apitoken", ("revoke",), lambda t: t.tokens.get(), id="tokens"),
]


def offered_actions(client: Client, changelist: str) -> set[str]:
    response = client.get(changelist, {"q": ""})  # dead letters: the one-by-one list, not the groups
    assert response.status_code == 200
    return set(re.findall(r'<option value="([a-z_]+)"', response.content.decode()))


@pytest.mark.parametrize(("changelist", "model", "actions", "make_row"), READ_ONLY_ADMINS)
def test_a_staff_member_who_may_only_view_is_offered_none_of_the_actions(
    client: Client, shop: Tenant, changelist: str, model: str, actions: tuple[str, ...], make_row: Any
) -> None:
    make_row(shop)
    offered = offered_actions(staff_with(client, f"view_{model}"), changelist)
    assert offered.isdisjoint(actions)


@pytest.mark.parametrize(("changelist", "model", "actions", "make_row"), READ_ONLY_ADMINS)
def test_a_staff_member_with_the_change_permission_is_offered_the_actions_on_view_only_pages(
    client: Client, shop: Tenant, changelist: str, model: str, actions: tuple[str, ...], make_row: Any
) -> None:
    row = make_row(shop)
    staff_with(client, f"view_{model}", f"change_{model}")
    assert set(actions) <= offered_actions(client, changelist)
    page = client.get(f"{changelist}{row.pk}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert client.get(f"{changelist}add/").status_code == 403
    assert client.get(f"{changelist}{row.pk}/delete/").status_code == 403


def test_a_staff_member_with_the_change_permission_can_cancel_jobs(client: Client, shop: Tenant) -> None:
    job = make_job(shop)
    staff_with(client, "view_job", "change_job")
    client.post(JOBS, {"action": "cancel_jobs", "_selected_action": [str(job.id)]})
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


def test_requeueing_dead_letters_needs_the_change_permission(client: Client, shop: Tenant) -> None:
    dead = "/admin/scheduling/deadletter/"
    grouped = f"{dead}grouped/"
    job = failed(make_job(shop))
    whole_group = {"domain": "shop.example", "error_class": "", "http_status": "", "action": "requeue"}

    viewer = staff_with(Client(), "view_deadletter")
    viewer.post(dead, {"action": "requeue", "_selected_action": [str(job.id)]})
    assert viewer.post(grouped, whole_group).status_code == 403
    assert "Requeue all" not in viewer.get(grouped).content.decode()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED

    operator = staff_with(client, "view_deadletter", "change_deadletter", username="operator")
    assert "Requeue all" in operator.get(grouped).content.decode()
    operator.post(dead, {"action": "requeue", "_selected_action": [str(job.id)]})
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
