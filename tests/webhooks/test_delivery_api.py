"""A tenant's webhook delivery log, redelivery and disabled callbacks through the API (FR-38):
HTTP in, rows and received requests out, real PostgreSQL and a real receiver on loopback."""

from __future__ import annotations

import json

import pytest
from standardwebhooks import Webhook

from apps.webhooks.models import DeliveryStatus, DisabledCallback, WebhookDelivery
from apps.webhooks.services import webhooks_enqueue_final
from tests.webhooks.test_deliveries import deliver_until, succeeded_job

pytestmark = pytest.mark.django_db

DELIVERIES = "/api/v1/webhook-deliveries"


def _status(delivery_id: int) -> str:
    return WebhookDelivery.objects.get(pk=delivery_id).status


def test_a_failed_delivery_is_listed_masked_and_redelivered_with_the_same_id_and_a_valid_new_signature(
    make_tenant, target, fast_retries
):
    tenant, _, api = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/status/500/hook?key=receiver-secret"))
    webhooks_enqueue_final()
    delivery = WebhookDelivery.objects.get(job=job)
    assert delivery.tenant_id == tenant.pk  # a job's delivery carries its tenant now
    deliver_until(lambda: _status(delivery.pk) == DeliveryStatus.FAILED)
    tried = len(target.requests_for("/status/500/hook"))

    page = api.get(DELIVERIES, {"status": "failed", "job": str(job.id)})
    assert page.status_code == 200, page.content
    [listed] = page.json()["items"]
    assert listed["id"] == delivery.pk and listed["job"] == str(job.id) and listed["status"] == "failed"
    assert listed["attempts"] == tried and listed["last_status_code"] == 500
    assert listed["last_attempt_at"] is not None and listed["next_attempt_at"] is None
    assert (
        listed["url"].endswith("/status/500/hook?key=***") and "receiver-secret" not in page.content.decode()
    )
    assert api.get(DELIVERIES, {"status": "delivered"}).json()["items"] == []

    r = api.post(f"{DELIVERIES}/{delivery.pk}/redeliver")
    assert r.status_code == 202, r.content
    assert _status(delivery.pk) == DeliveryStatus.PENDING
    deliver_until(lambda: len(target.requests_for("/status/500/hook")) > tried)
    received = target.requests_for("/status/500/hook")
    (_, _, _, first_headers, first_body), (_, _, _, headers, body) = received[0], received[tried]
    assert body == first_body == delivery.body.encode()
    assert headers["webhook-id"] == first_headers["webhook-id"] == str(delivery.pk)
    assert int(headers["webhook-timestamp"]) >= int(first_headers["webhook-timestamp"])
    tenant.refresh_from_db()
    assert Webhook(tenant.webhook_secret).verify(body, headers) == json.loads(body)


def test_another_tenants_deliveries_are_neither_listed_nor_redelivered(make_tenant):
    other, _, _ = make_tenant()
    _, _, mine = make_tenant()
    theirs = succeeded_job(other, callback_url="http://127.0.0.1:9/hook")
    webhooks_enqueue_final()
    delivery = WebhookDelivery.objects.get(job=theirs)
    assert mine.get(DELIVERIES).json()["items"] == []
    assert mine.post(f"{DELIVERIES}/{delivery.pk}/redeliver").status_code == 404
    assert mine.post(f"{DELIVERIES}/nonsense/redeliver").status_code == 404
    assert WebhookDelivery.objects.get(pk=delivery.pk).attempts == 0


def test_the_list_walks_by_cursor_without_repeats_and_refuses_bad_parameters(make_tenant):
    tenant, _, api = make_tenant()
    for n in range(5):
        succeeded_job(tenant, callback_url=f"http://127.0.0.1:9/hook/{n}")
    webhooks_enqueue_final()
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.get(DELIVERIES, params).json()
        seen += [d["id"] for d in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(
        WebhookDelivery.objects.filter(tenant=tenant).values_list("id", flat=True), reverse=True
    )
    for bad in ({"status": "lost"}, {"limit": 0}, {"cursor": "x"}, {"colour": "red"}, {"job": "nope"}):
        r = api.get(DELIVERIES, bad)
        assert r.status_code == 400 and r.json()["type"] == "validation_error", (bad, r.content)


def test_a_callback_switched_off_by_a_410_is_listed_and_re_enabled(make_tenant, target, fast_retries):
    tenant, _, api = make_tenant()
    other, _, other_api = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/status/410/gone?sig=abc"))
    webhooks_enqueue_final()
    deliver_until(lambda: DisabledCallback.objects.filter(tenant=tenant).exists())
    [listed] = api.get("/api/v1/disabled-callbacks").json()["items"]
    assert listed["url"].endswith("/status/410/gone?sig=***")
    assert listed["delivery"] == WebhookDelivery.objects.get(job=job).pk
    assert other_api.get("/api/v1/disabled-callbacks").json()["items"] == []
    assert other_api.post(f"/api/v1/disabled-callbacks/{listed['id']}/enable").status_code == 404
    assert api.post(f"/api/v1/disabled-callbacks/{listed['id']}/enable").status_code == 204
    assert not DisabledCallback.objects.filter(tenant=tenant).exists()
    assert api.post(f"/api/v1/disabled-callbacks/{listed['id']}/enable").status_code == 404
