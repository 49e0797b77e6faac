"""A batch's own callback through the real processes (FR-10, docs/webhooks.md): POST /batches with
``callback_url``, the writer loads it, the worker fetches its jobs from a local target, beat's
check announces it and the deliverer calls the target, signed as Standard Webhooks 1.0, once."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import pytest
from standardwebhooks import Webhook

from apps.batches.models import Batch
from apps.webhooks.models import DeliveryStatus, WebhookDelivery
from tests.support.procs import wait_for

pytestmark = pytest.mark.e2e

HOOK = "/flaky/batch-hook"


def test_a_batch_with_a_callback_is_announced_once_when_its_jobs_end_signed_and_with_its_counts(
    services, make_tenant, target
):
    services(SCRAPEJOBS_WEBHOOK_RETRY_SCHEDULE_S="0.5,0.5,0.5").start_all(worker_concurrency=10)
    tenant, _, api = make_tenant()
    rows = [{"url": target.url(f"/bytes/{10 + i}"), "max_attempts": 1} for i in range(20)]
    rows[3] = {"url": target.url("/status/404"), "max_attempts": 1}  # fails at once (permanent)
    rows[7] = {"url": "mailto:someone@example.com"}  # rejected: never a job
    # The receiver answers 503 once: the one delivery is retried, keeping its webhook-id.
    query = urlencode({"callback_url": target.url(f"{HOOK}?fail=1&code=503")})

    r = api.post(f"/api/v1/batches?{query}", rows, format="json")

    assert r.status_code == 202, r.content
    batch_id = r.json()["id"]
    wait_for(lambda: len(target.requests_for(HOOK)) >= 2, 120, interval=0.2, what="the batch's callback")
    time.sleep(6)  # more than one more beat check and deliverer run: nothing else is sent

    received = target.requests_for(HOOK)
    assert len(received) == 2, [(path, headers.get("webhook-id")) for _at, path, _m, headers, _b in received]
    [delivery] = WebhookDelivery.objects.filter(batch_id=batch_id)
    assert (delivery.status, delivery.event, delivery.tenant_id) == (
        DeliveryStatus.DELIVERED,
        "batch.completed",
        tenant.id,
    )
    assert Batch.objects.get(id=batch_id).callback_enqueued_at is not None
    for _at, _path, method, headers, body in received:
        assert method == "POST"
        assert headers["webhook-id"] == str(delivery.id)
        payload = Webhook(tenant.webhook_secret).verify(body, headers)
        assert payload == json.loads(body)
    assert payload["type"] == "batch.completed" and payload["id"] == batch_id
    assert (payload["status"], payload["total"], payload["accepted"], payload["rejected"]) == (
        "loaded",
        20,
        19,
        1,
    )
    assert payload["jobs"] == {"succeeded": 18, "failed": 1, "cancelled": 0}
    # What GET /batches/{id} shows agrees.
    assert api.get(f"/api/v1/batches/{batch_id}").json()["jobs"] == {"succeeded": 18, "failed": 1}
