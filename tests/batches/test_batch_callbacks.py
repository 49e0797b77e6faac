"""A batch's own callback (FR-10, docs/webhooks.md): POST /batches?callback_url= checked as a job's
callback_url, and apps/batches/completion.py announcing the batch once every job of it is final,
once, whoever checks."""

from __future__ import annotations

import json
import threading
import uuid
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test import override_settings

from apps.batches.completion import batch_completion_check, batches_completion_announce
from apps.batches.loader import batch_load
from apps.batches.models import Batch
from apps.jobs.models import Job
from apps.webhooks.delivering import webhook_deliveries_claim_due
from apps.webhooks.models import DeliveryStatus, DisabledCallback, WebhookDelivery
from apps.webhooks.services import url_digest
from tests.batches.test_batches import BATCHES, _results_here, rows  # noqa: F401

HOOK = "http://hooks.example/batch"


@pytest.fixture
def storage_dir(local_results):  # noqa: F811 - the results storage test_batches points at tmp_path
    return local_results


def _loaded(api, body, *, callback_url: str | None = HOOK) -> uuid.UUID:
    query = "" if callback_url is None else f"?{_query(callback_url)}"
    r = api.post(f"{BATCHES}{query}", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 202, r.content
    batch_id = uuid.UUID(r.json()["id"])
    assert batch_load(batch_id=batch_id) == "loaded"
    return batch_id


def _end(batch_id: uuid.UUID, status: str = "succeeded", **rows_filter: object) -> None:
    Job.objects.filter(batch_id=batch_id, **rows_filter).update(status=status)


@pytest.mark.django_db
@override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False)
@pytest.mark.parametrize(
    "callback_url",
    ["ftp://hooks.example/x", "http://127.0.0.1:9/x", "http://localhost/x", "", "http://exa mple.com/"],
)
def test_a_bad_callback_url_is_a_400_as_on_post_jobs_and_creates_nothing(api, storage_dir, callback_url):
    r = api.post(
        f"{BATCHES}?{_query(callback_url)}", data=json.dumps(rows(2)), content_type="application/json"
    )
    job = api.post("/api/v1/jobs", {"url": "http://t.example/", "callback_url": callback_url}, format="json")

    assert r.status_code == 400, r.content
    assert job.status_code == 400, job.content
    assert r.json() == job.json()  # the same type, code, detail and field message
    assert list(r.json()["fields"]) == ["callback_url"]
    assert Batch.objects.count() == 0 and not list(storage_dir.rglob("*.parquet"))


def _query(callback_url: str) -> str:
    return urlencode({"callback_url": callback_url})


@pytest.mark.django_db
def test_the_callback_is_part_of_the_request_an_idempotency_key_replays(api):
    first = submit_with(api, HOOK, key="cb-1")
    again = submit_with(api, HOOK, key="cb-1")
    other = submit_with(api, HOOK + "2", key="cb-1")
    without = submit_with(api, None, key="cb-1")
    assert first.status_code == again.status_code == 202 and again.json()["id"] == first.json()["id"]
    assert other.status_code == without.status_code == 422
    assert Batch.objects.get().callback_url == HOOK


def submit_with(api, callback_url: str | None, *, key: str):
    query = "" if callback_url is None else f"?{_query(callback_url)}"
    return api.post(
        f"{BATCHES}{query}",
        data=json.dumps(rows(3)),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


@pytest.mark.django_db
def test_a_batch_is_announced_once_when_its_last_job_ends_with_its_counts(make_tenant):
    tenant, _, api = make_tenant()
    body = rows(6)
    body[2] = {"url": "mailto:x@example.com"}  # rejected: not a job
    batch_id = _loaded(api, body)
    plain = _loaded(api, rows(2), callback_url=None)
    _end(plain)

    assert batches_completion_announce() == 0  # five jobs queued
    _end(batch_id, "succeeded", batch_row__lte=4)
    assert batches_completion_announce() == 0
    assert Batch.objects.get(id=batch_id).final_below_row == 5  # the next check starts at row 5
    _end(batch_id, "failed", batch_row=5)
    _end(batch_id, "cancelled", batch_row=6)

    assert batches_completion_announce() == 1
    assert batches_completion_announce() == 0  # once

    delivery = WebhookDelivery.objects.get()
    batch = Batch.objects.get(id=batch_id)
    assert (delivery.job_id, delivery.batch_id, delivery.tenant_id) == (None, batch_id, tenant.id)
    assert (delivery.event, delivery.url, delivery.status) == ("batch.completed", HOOK, "pending")
    assert batch.callback_enqueued_at is not None
    assert json.loads(delivery.body) == {
        "type": "batch.completed",
        "id": str(batch_id),
        "status": "loaded",
        "total": 6,
        "accepted": 5,
        "rejected": 1,
        "loaded": 5,
        "jobs": {"succeeded": 3, "failed": 1, "cancelled": 1},
        "error": None,
        "created_at": batch.created_at.isoformat().replace("+00:00", "Z"),
        "finished_at": batch.finished_at.isoformat().replace("+00:00", "Z"),
    }
    # It is claimed and signed with the batch's tenant's secret, like a job's delivery.
    [claimed] = webhook_deliveries_claim_due(limit=10)
    assert (claimed.id, claimed.url, claimed.secrets) == (delivery.id, HOOK, [tenant.webhook_secret])


@pytest.mark.django_db
def test_a_job_requeued_below_the_mark_holds_the_announcement_back(api):
    batch_id = _loaded(api, rows(4))
    _end(batch_id, batch_row__lte=3)
    assert batches_completion_announce() == 0
    assert Batch.objects.get(id=batch_id).final_below_row == 4
    # Row 4 ends, and an operator requeues row 1, which the mark has passed.
    _end(batch_id, batch_row=4)
    _end(batch_id, "queued", batch_row=1)

    assert batches_completion_announce() == 0
    batch = Batch.objects.get(id=batch_id)
    assert (batch.final_below_row, batch.callback_enqueued_at) == (1, None)
    assert not WebhookDelivery.objects.exists()

    _end(batch_id, batch_row=1)
    assert batches_completion_announce() == 1
    assert json.loads(WebhookDelivery.objects.get().body)["jobs"]["succeeded"] == 4


@pytest.mark.django_db
def test_a_batch_of_only_rejected_rows_and_a_failed_batch_are_announced_too(api, storage_dir):
    all_rejected = _loaded(api, [{"url": "mailto:a@example.com"}, {"url": "ftp://x.example/"}])
    r = api.post(f"{BATCHES}?{_query(HOOK)}", data=json.dumps(rows(3)), content_type="application/json")
    failed = uuid.UUID(r.json()["id"])
    [part] = [p for p in storage_dir.rglob("part-*.parquet") if str(failed) in str(p)]
    part.write_bytes(b"damaged")
    assert batch_load(batch_id=failed) == "failed"

    assert batches_completion_announce() == 2

    by_batch = {d.batch_id: d for d in WebhookDelivery.objects.all()}
    empty = json.loads(by_batch[all_rejected].body)
    assert (by_batch[all_rejected].event, empty["status"], empty["accepted"], empty["rejected"]) == (
        "batch.completed",
        "loaded",
        0,
        2,
    )
    assert empty["jobs"] == {"succeeded": 0, "failed": 0, "cancelled": 0}
    broken = json.loads(by_batch[failed].body)
    assert (by_batch[failed].event, broken["type"], broken["status"]) == (
        "batch.failed",
        "batch.failed",
        "failed",
    )
    assert broken["error"]


@pytest.mark.django_db
def test_a_batch_callback_disabled_by_a_410_is_recorded_skipped(make_tenant):
    tenant, _, api = make_tenant()
    DisabledCallback.objects.create(
        tenant=tenant, url=HOOK, url_sha256=url_digest(HOOK), disabled_at="2026-01-01T00:00:00Z"
    )
    batch_id = _loaded(api, rows(1))
    _end(batch_id)
    assert batches_completion_announce() == 1
    assert WebhookDelivery.objects.get().status == DeliveryStatus.SKIPPED


@pytest.mark.django_db(transaction=True)
def test_checkers_racing_on_one_finished_batch_enqueue_one_delivery(api):
    batch_id = _loaded(api, rows(50))
    _end(batch_id)
    racers = 8
    start = threading.Barrier(racers)
    results: list[bool] = []
    errors: list[BaseException] = []

    def check() -> None:
        try:
            start.wait()
            results.append(batch_completion_check(batch_id=batch_id, final_below_row=0))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            connection.close()

    threads = [threading.Thread(target=check) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert not errors, errors
    assert sorted(results) == [False] * (racers - 1) + [True]
    assert WebhookDelivery.objects.filter(batch_id=batch_id).count() == 1


@pytest.mark.django_db
def test_the_admin_shows_a_batch_delivery_and_the_batchs_callback(admin_client, api):
    batch_id = _loaded(api, rows(1))
    _end(batch_id)
    batches_completion_announce()
    delivery = WebhookDelivery.objects.get()

    listed = admin_client.get("/admin/webhooks/webhookdelivery/")
    page = admin_client.get(f"/admin/webhooks/webhookdelivery/{delivery.id}/change/")
    batch_page = admin_client.get(f"/admin/batches/batch/{batch_id}/change/")

    assert listed.status_code == page.status_code == batch_page.status_code == 200
    assert str(batch_id) in listed.content.decode() and "batch.completed" in page.content.decode()
    assert HOOK in batch_page.content.decode()
