"""Webhook deliveries against a real local receiver and the real database (FR-7, FR-1 to FR-7)."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.jobs.cancel_requeue import job_cancel
from apps.jobs.claims import job_claim
from apps.jobs.models import Job
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.jobs.receipts import AttemptFinished
from apps.outbound import addresses
from apps.webhooks.delivering import (
    webhook_attempt_record,
    webhook_deliveries_claim_due,
    webhooks_deliver_due,
)
from apps.webhooks.models import DeliveryStatus, WebhookAttempt, WebhookDelivery
from apps.webhooks.sending import PostOutcome
from apps.webhooks.services import webhook_deliveries_redeliver, webhooks_enqueue_final
from apps.webhooks.signing import SIGNATURE_HEADER, signature_verify
from tests.scheduling.factories import queued_job
from tests.support.procs import wait_for


def succeeded_job(tenant, *, callback_url: str | None):
    job = queued_job(tenant, callback_url=callback_url)
    claimed = job_claim(job_id=job.id, worker="w@h:1:1")
    assert claimed is not None
    receipt = AttemptFinished(
        job_id=str(job.id), attempt=1, outcome="succeeded", finished_at=1.9e9, duration_ms=3
    )
    assert attempts_apply_finished([receipt]).applied == 1
    job.refresh_from_db()
    return job


def deliver_until(pred, timeout: float = 10.0) -> None:
    def delivered() -> bool:
        webhooks_deliver_due(budget_s=1)
        return bool(pred())

    wait_for(delivered, timeout, interval=0.05, what="the deliveries to reach the expected state")


@pytest.mark.django_db
def test_a_final_job_with_a_callback_gets_one_delivery_and_every_final_job_is_stamped(make_tenant):
    tenant, _, _ = make_tenant()
    with_hook = succeeded_job(tenant, callback_url="http://127.0.0.1:9/hook")
    without = succeeded_job(tenant, callback_url=None)
    cancelled = queued_job(tenant, callback_url="http://127.0.0.1:9/c")
    job_cancel(job_id=cancelled.id)

    assert webhooks_enqueue_final() == 2
    assert webhooks_enqueue_final() == 0  # stamped: a second run announces nothing again

    delivery = WebhookDelivery.objects.get(job=with_hook)
    assert json.loads(delivery.body) == {
        "id": str(with_hook.id),
        "status": "succeeded",
        "finished_at": with_hook.finished_at.isoformat().replace("+00:00", "Z"),
    }
    assert WebhookDelivery.objects.get(job=cancelled).event == "cancelled"
    assert not Job.objects.filter(
        id__in=[with_hook.id, without.id, cancelled.id], final_published_at=None
    ).exists()


@pytest.mark.django_db
def test_a_running_job_is_not_announced(make_tenant):
    tenant, _, _ = make_tenant()
    job = queued_job(tenant, callback_url="http://127.0.0.1:9/hook")
    job_claim(job_id=job.id, worker="w@h:1:1")
    assert webhooks_enqueue_final() == 0


@pytest.mark.django_db(transaction=True)
def test_enqueuing_from_several_threads_at_once_creates_one_delivery_per_job(make_tenant):
    tenant, _, _ = make_tenant()
    jobs = [succeeded_job(tenant, callback_url="http://127.0.0.1:9/hook") for _ in range(60)]
    barrier = threading.Barrier(4)
    created: list[int] = []

    def run() -> None:
        try:
            barrier.wait()
            created.append(webhooks_enqueue_final(batch_size=5))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sum(created) == len(jobs) == WebhookDelivery.objects.count()


@pytest.mark.django_db
def test_a_receiver_failing_twice_gets_the_signed_event_three_times_and_the_log_shows_all_three(
    make_tenant, target, fast_retries
):
    """FR-7: non-2xx is retried; every attempt is logged; the signature verifies."""
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/flaky/hook?fail=2&code=500"))
    webhooks_enqueue_final()

    deliver_until(lambda: WebhookDelivery.objects.get(job=job).status == DeliveryStatus.DELIVERED)

    delivery = WebhookDelivery.objects.get(job=job)
    log = list(WebhookAttempt.objects.filter(delivery=delivery).values_list("number", "status_code"))
    assert log == [(1, 500), (2, 500), (3, 200)]
    assert delivery.attempts == 3 and delivery.last_status_code == 200 and delivery.delivered_at
    received = target.requests_for("/flaky/hook")
    assert len(received) == 3
    for _at, _path, method, headers, body in received:
        assert method == "POST"
        assert json.loads(body) == {
            "id": str(job.id),
            "status": "succeeded",
            "finished_at": json.loads(body)["finished_at"],
        }
        assert signature_verify(secret=tenant.webhook_secret, header=headers[SIGNATURE_HEADER], body=body)
        assert not signature_verify(secret="whsec_wrong", header=headers[SIGNATURE_HEADER], body=body)


@pytest.mark.django_db
def test_a_delivery_that_keeps_failing_stops_after_its_schedule(make_tenant, target, fast_retries):
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/status/503"))
    webhooks_enqueue_final()

    deliver_until(lambda: WebhookDelivery.objects.get(job=job).status == DeliveryStatus.FAILED)

    delivery = WebhookDelivery.objects.get(job=job)
    assert delivery.attempts == 4  # the first try and one retry per scheduled delay
    assert delivery.next_attempt_at is None
    assert len(target.requests_for("/status/503")) == 4


@pytest.mark.django_db
def test_a_slow_callback_is_cut_off_at_the_delivery_timeout(make_tenant, target, fast_retries):
    fast_retries.SCRAPEJOBS_WEBHOOK_TIMEOUT_S = 1.0
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/slow?delay=20"))
    webhooks_enqueue_final()

    started = time.monotonic()
    webhooks_deliver_due(budget_s=0.1)
    took = time.monotonic() - started

    attempt = WebhookAttempt.objects.get(delivery__job=job)
    # time is the subject: the delivery timeout of 1 s cuts off within 3
    # s a callback that would answer after 20 s
    assert took < 3
    assert attempt.error and "timed out" in attempt.error
    assert WebhookDelivery.objects.get(job=job).status == DeliveryStatus.PENDING  # retried later


@pytest.mark.django_db
def test_a_callback_on_a_private_address_is_refused_without_retrying(make_tenant, target, fast_retries):
    fast_retries.SCRAPEJOBS_ALLOW_PRIVATE_TARGETS = False
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/echo"))
    webhooks_enqueue_final()

    webhooks_deliver_due(budget_s=0.1)

    delivery = WebhookDelivery.objects.get(job=job)
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 1
    assert "refused" in delivery.last_error
    assert target.requests_for("/echo") == []


@pytest.mark.django_db
def test_a_stale_attempt_cannot_overwrite_a_newer_one(make_tenant):
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url="http://127.0.0.1:9/hook")
    webhooks_enqueue_final()
    first = webhook_deliveries_claim_due(limit=1)[0]
    WebhookDelivery.objects.filter(id=first.id).update(next_attempt_at=timezone.now())
    second = webhook_deliveries_claim_due(limit=1)[0]
    assert second.attempt == first.attempt + 1

    late = webhook_attempt_record(
        delivery_id=first.id, attempt=first.attempt, started_at=timezone.now(), outcome=PostOutcome(200, 5)
    )

    assert late is None
    assert WebhookDelivery.objects.get(job=job).status == DeliveryStatus.PENDING
    assert WebhookAttempt.objects.filter(delivery_id=first.id).count() == 1  # still logged


@pytest.mark.django_db
def test_redelivery_sends_again_with_a_fresh_schedule_and_continues_the_log(
    make_tenant, target, fast_retries
):
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/status/200"))
    webhooks_enqueue_final()
    deliver_until(lambda: WebhookDelivery.objects.get(job=job).status == DeliveryStatus.DELIVERED)
    delivery = WebhookDelivery.objects.get(job=job)

    assert webhook_deliveries_redeliver(delivery_ids=[delivery.id]) == 1
    deliver_until(lambda: WebhookDelivery.objects.get(job=job).status == DeliveryStatus.DELIVERED)

    assert list(WebhookAttempt.objects.filter(delivery=delivery).values_list("number", flat=True)) == [1, 2]
    assert len(target.requests_for("/status/200")) == 2


@pytest.mark.django_db
def test_the_admin_lists_deliveries_by_status_and_redelivers(make_tenant, target):
    user = get_user_model().objects.create_superuser("ops", "ops@example.test", "pw")
    client = Client()
    client.force_login(user)
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/status/500"))
    webhooks_enqueue_final()
    delivery = WebhookDelivery.objects.get(job=job)
    WebhookDelivery.objects.filter(id=delivery.id).update(status=DeliveryStatus.FAILED, next_attempt_at=None)

    changelist = reverse("admin:webhooks_webhookdelivery_changelist")
    assert str(job.id) in client.get(changelist, {"status__exact": "failed"}).content.decode()
    assert str(job.id) not in client.get(changelist, {"status__exact": "delivered"}).content.decode()
    assert client.get(reverse("admin:webhooks_webhookdelivery_change", args=[delivery.id])).status_code == 200

    client.post(changelist, {"action": "redeliver", "_selected_action": [str(delivery.id)]})

    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.PENDING and delivery.next_attempt_at is not None


# --- The call itself: the shared guarded connection pool -------------------------------------


def _resolve_to(monkeypatch, *ips: str) -> None:
    """Stand in for the DNS: every name resolves to ``ips``, in that order."""
    monkeypatch.setattr(
        addresses, "system_resolve", lambda host, port: [(socket.AF_INET, (ip, port)) for ip in ips]
    )


@pytest.mark.django_db
def test_the_call_is_one_post_with_the_same_headers_and_body_as_ever(make_tenant, target, fast_retries):
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/echo?x=1#frag"))
    webhooks_enqueue_final()

    webhooks_deliver_due(budget_s=0.1)

    delivery = WebhookDelivery.objects.get(job=job)
    assert delivery.status == DeliveryStatus.DELIVERED and delivery.last_status_code == 200
    [(_at, path, method, headers, body)] = target.requests_for("/echo")
    assert (path, method, body) == ("/echo", "POST", delivery.body.encode())
    assert list(headers) == [
        "Host",
        "User-Agent",
        "Content-Type",
        "Content-Length",
        "Connection",
        SIGNATURE_HEADER,
        "Scrapejobs-Delivery",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    ]
    assert headers["Host"] == f"127.0.0.1:{target.server_address[1]}"
    assert headers["User-Agent"] == "scrapejobs-webhooks/1.0"
    assert headers["Content-Type"] == "application/json" and headers["Connection"] == "close"
    assert headers["Content-Length"] == str(len(body))
    assert headers["Scrapejobs-Delivery"] == str(delivery.id)


@pytest.mark.django_db
def test_a_callback_whose_first_address_refuses_connections_is_delivered_through_the_next(
    make_tenant, target, fast_retries, monkeypatch
):
    # 127.0.0.2 is this machine too, but nothing listens there: the target is bound to 127.0.0.1.
    _resolve_to(monkeypatch, "127.0.0.2", "127.0.0.1")
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=f"http://hooks.test:{target.server_address[1]}/status/200")
    webhooks_enqueue_final()

    webhooks_deliver_due(budget_s=0.1)

    delivery = WebhookDelivery.objects.get(job=job)
    assert delivery.status == DeliveryStatus.DELIVERED and delivery.attempts == 1
    assert len(target.requests_for("/status/200")) == 1


@pytest.mark.django_db
def test_a_callback_name_resolving_to_loopback_is_refused_without_retrying(
    make_tenant, target, fast_retries, monkeypatch
):
    fast_retries.SCRAPEJOBS_ALLOW_PRIVATE_TARGETS = False
    _resolve_to(monkeypatch, "127.0.0.1")
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=f"http://hooks.test:{target.server_address[1]}/echo")
    webhooks_enqueue_final()

    webhooks_deliver_due(budget_s=0.1)

    delivery = WebhookDelivery.objects.get(job=job)
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 1
    assert "refused" in delivery.last_error and delivery.last_status_code is None
    assert target.requests_for("/echo") == []


@pytest.mark.django_db
def test_a_redirect_is_recorded_as_the_answer_and_not_followed(make_tenant, target, fast_retries):
    # The retry is due a minute later, so this call makes the one attempt: with the fixture's
    # 50 ms delay, a call whose first attempt answered within its 0.1 s made a second one.
    fast_retries.SCRAPEJOBS_WEBHOOK_RETRY_SCHEDULE_S = [60.0, 60.0, 60.0]
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/redirect/1"))
    webhooks_enqueue_final()

    webhooks_deliver_due(budget_s=0.1)

    attempt = WebhookAttempt.objects.get(delivery__job=job)
    assert attempt.status_code == 302 and attempt.error.startswith("HTTP 302")
    assert WebhookDelivery.objects.get(job=job).status == DeliveryStatus.PENDING  # retried later
    assert [r[1] for r in target.requests_for("/redirect")] == ["/redirect/1"]


@pytest.mark.django_db
def test_a_callback_is_refused_on_the_connected_peer_even_if_resolution_was_fooled(
    make_tenant, target, fast_retries, monkeypatch
):
    # Stand-in for a DNS answer that changed between the check and the connect: the candidate
    # list says nothing is wrong, the socket's peer is what refuses.
    monkeypatch.setattr(
        "apps.outbound.connections.resolve_allowed",
        lambda host, port, **_: [(socket.AF_INET, ("127.0.0.1", port))],
    )
    fast_retries.SCRAPEJOBS_ALLOW_PRIVATE_TARGETS = False
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=f"http://hooks.test:{target.server_address[1]}/echo")
    webhooks_enqueue_final()

    webhooks_deliver_due(budget_s=0.1)

    delivery = WebhookDelivery.objects.get(job=job)
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 1
    # Refused, said without the address (the operator's log has it, not the tenant's record).
    assert "refused address" in delivery.last_error and "127.0.0.1" not in delivery.last_error
    assert target.requests_for("/echo") == []


@pytest.mark.django_db
def test_a_dead_receivers_backlog_leaves_another_tenant_its_calls(make_tenant, target, settings):
    """Asserted by order: with tenant A's receiver holding every call for 10 s and 50 of A's
    deliveries due first, tenant B's webhook arrives before A's first call returns; A holds at
    most half the slots (SCRAPEJOBS_WEBHOOK_TENANT_CONCURRENCY's default)."""
    settings.SCRAPEJOBS_WEBHOOK_TIMEOUT_S = 10.0
    settings.SCRAPEJOBS_WEBHOOK_CONCURRENCY = 8
    a, b = make_tenant()[0], make_tenant()[0]
    for _ in range(50):
        succeeded_job(a, callback_url=target.url("/slow?delay=10"))
    webhooks_enqueue_final()
    other = succeeded_job(b, callback_url=target.url("/status/200"))
    webhooks_enqueue_final()

    webhooks_deliver_due(budget_s=1)  # returns once its calls in flight have ended

    a_calls, b_calls = target.requests_for("/slow"), target.requests_for("/status/200")
    assert len(b_calls) == 1 and len(a_calls) == 4
    assert b_calls[0][0] < min(at for at, *_ in a_calls) + 10  # before A's first call returned
    assert WebhookDelivery.objects.get(job=other).status == DeliveryStatus.DELIVERED
