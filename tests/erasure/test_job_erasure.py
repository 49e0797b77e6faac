"""DELETE /jobs/{id} (FR-52): jobs in through HTTP, fetched by the worker's own attempt against a
local target and folded by the writer's fold, erased through HTTP; then the storage (local files,
and S3 through a moto server), the read cache, the rows and the answers are looked at."""

from __future__ import annotations

import urllib.request
import uuid

import pytest
from django.core.files.storage import FileSystemStorage
from django.test import Client

from apps.jobs.claims import job_claim
from apps.jobs.models import Attempt, Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.jobs.receipts import receipt_encode
from apps.redis_clients import fail_open_redis, job_read_cache_key
from apps.results.storage import result_store, results_storage, screenshot_key, storage_files_under
from apps.scraping.attempt import job_run_attempt
from apps.tenants.models import Tenant
from apps.tenants.services import token_create
from apps.webhooks.models import WebhookAttempt, WebhookDelivery
from apps.writer.streams import DEAD_RECEIPTS, FIELD, writer_redis
from tests.results.test_storage import s3_results  # noqa: F401 - the moto S3 fixture

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = "/api/v1/jobs"


@pytest.fixture(params=["local", "s3"])
def storage_kind(request, local_results):
    """Every test runs on local files and on S3 (moto's server)."""
    if request.param == "s3":
        request.getfixturevalue("s3_results")
    return request.param


def _stored() -> list[str]:
    return sorted(k for k in storage_files_under("results") if "/.spool/" not in k)


def _submit(api, url: str, **body) -> str:
    r = api.post(JOBS, {"url": url, **body}, format="json")
    assert r.status_code == 202, r.content
    return r.json()["id"]


def _run(job_id: str):
    """The worker's attempt and the writer's fold; None when single-flight served the job a
    stored body in place (no receipt)."""
    receipt = job_run_attempt(job_id=job_id, worker="w:1:1")
    if receipt is not None:
        attempts_apply_finished([receipt])
    return receipt


def _download(link: str, kind: str) -> bytes:
    if kind == "s3":
        with urllib.request.urlopen(link, timeout=10) as response:
            return response.read()
    response = Client().get(link)
    assert response.status_code == 200
    return response.getvalue()


def test_an_erased_job_leaves_no_object_no_cache_copy_no_request_and_answers_410(
    make_tenant, target, storage_kind
):
    tenant, _, api = make_tenant()
    job_id = _submit(
        api,
        target.url("/bytes/700?email=someone@example.com"),
        headers={"X-Customer": "someone@example.com"},
        callback_url="http://127.0.0.1:9/hook?to=someone@example.com",
    )
    other_id = _submit(api, target.url("/bytes/300?other"))
    receipt = _run(job_id)
    _run(other_id)
    job = Job.objects.get(id=job_id)
    assert job.status == JobStatus.SUCCEEDED and job.result_key
    # A rendered page's screenshot lives beside its body (FR-31).
    result_store(job_id=job.id, attempt=1, chunks=[b"png"], key=screenshot_key(job.result_key))
    assert len(_stored()) == 3  # the two bodies and the screenshot
    # Its webhook delivery (with an attempt's error) and a dead receipt of it and of another job.
    delivery = WebhookDelivery.objects.create(
        job=job,
        tenant=tenant,
        event="succeeded",
        url=job.callback_url,
        body='{"url": "someone@example.com"}',
        created_at=job.finished_at,
        last_error="connect to 127.0.0.1:9 refused",
    )
    WebhookAttempt.objects.create(
        delivery=delivery,
        number=1,
        started_at=job.finished_at,
        duration_ms=1,
        error="refused at ...?to=someone",
    )
    r = writer_redis()
    r.xadd(DEAD_RECEIPTS, {FIELD: receipt_encode(receipt), "error": "x"})
    other_receipt = receipt_encode(receipt).replace(job_id.encode(), other_id.encode())
    r.xadd(DEAD_RECEIPTS, {FIELD: other_receipt, "error": "x"})
    # The read cache holds the job once it was read.
    assert api.get(f"{JOBS}/{job_id}").status_code == 200
    assert (fail_open_redis().get(job_read_cache_key(job_id)) or "").endswith("}")

    assert api.delete(f"{JOBS}/{job_id}").status_code == 204

    other = Job.objects.get(id=other_id)
    assert _stored() == [other.result_key]  # the other job's body only
    cached = fail_open_redis().get(job_read_cache_key(job_id))
    assert cached is None or cached.endswith("|")  # a mark, never a copy
    for path in (f"{JOBS}/{job_id}", f"{JOBS}/{job_id}/result", f"{JOBS}/{job_id}/attempts"):
        gone = api.get(path)
        assert gone.status_code == 410, path
        assert gone.json()["code"] == "job_erased"
    tomb = Job.objects.get(id=job_id)
    assert tomb.status == JobStatus.ERASED and tomb.tenant_id == tenant.id
    assert (tomb.url, tomb.headers, tomb.body, tomb.domain, tomb.callback_url) == ("", {}, None, "", None)
    assert tomb.created_at and tomb.finished_at and tomb.attempts == 1
    kept = [
        tomb.result_key,
        tomb.result_sha256,
        tomb.result_final_url,
        tomb.result_headers,
        tomb.last_error,
        tomb.fetch_key,
    ]
    assert kept == [None] * len(kept)
    assert not Attempt.objects.filter(job_id=job_id, error__isnull=False).exists()
    delivery.refresh_from_db()
    assert (delivery.url, delivery.body, delivery.last_error) == ("", "", None)
    assert WebhookAttempt.objects.get(delivery=delivery).error is None
    assert api.post(f"/api/v1/webhook-deliveries/{delivery.id}/redeliver").status_code == 404
    left = [fields[FIELD] for _, fields in r.xrange(DEAD_RECEIPTS)]
    assert left == [other_receipt.decode()]
    # Lists and counts keep it, as a tombstone.
    listed = api.get(JOBS, {"status": "erased"}).json()["items"]
    assert [(i["id"], i["status"], i["url"]) for i in listed] == [(job_id, "erased", "")]
    assert len(api.get(JOBS).json()["items"]) == 2
    # Erasing it again changes nothing; the other job is untouched.
    assert api.delete(f"{JOBS}/{job_id}").status_code == 204
    assert api.get(f"{JOBS}/{other_id}").json()["status"] == "succeeded"


def test_a_queued_or_running_job_is_409_and_unchanged(make_tenant, local_results):
    _, _, api = make_tenant()
    job_id = _submit(api, "http://a.example/x")
    r = api.delete(f"{JOBS}/{job_id}")
    assert r.status_code == 409 and r.json()["code"] == "job_not_final"
    assert job_claim(job_id=uuid.UUID(job_id), worker="w-test") is not None
    r = api.delete(f"{JOBS}/{job_id}")
    assert r.status_code == 409 and "running" in r.json()["detail"]
    job = Job.objects.get(id=job_id)
    assert (job.status, job.url) == (JobStatus.RUNNING, "http://a.example/x")


def test_another_tenants_job_or_a_bad_id_is_404_and_a_read_token_is_403(make_tenant, local_results):
    (owner, _, api), (_, _, stranger) = make_tenant(), make_tenant()
    job_id = _submit(api, "http://a.example/x")
    api.post(f"{JOBS}/{job_id}/cancel")
    assert stranger.delete(f"{JOBS}/{job_id}").status_code == 404
    assert api.delete(f"{JOBS}/not-a-job").status_code == 404
    raw = token_create(tenant=owner, name="ro", scope="read")
    reader = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    r = reader.delete(f"{JOBS}/{job_id}")
    assert r.status_code == 403 and r.json()["code"] == "token_scope_insufficient"
    assert Job.objects.get(id=job_id).status == JobStatus.CANCELLED
    assert api.delete(f"{JOBS}/{job_id}").status_code == 204  # a cancelled job is final: erased
    assert Job.objects.get(id=job_id).status == JobStatus.ERASED


def test_a_storage_that_refuses_a_delete_is_503_and_erases_nothing(
    make_tenant, target, local_results, monkeypatch
):
    _, _, api = make_tenant()
    job_id = _submit(api, target.url("/bytes/100"))
    _run(job_id)

    def refuse(self, name):
        raise OSError("disk gone")

    monkeypatch.setattr(FileSystemStorage, "delete", refuse)
    r = api.delete(f"{JOBS}/{job_id}")
    assert r.status_code == 503 and r.json()["code"] == "storage_unavailable"
    job = Job.objects.get(id=job_id)
    assert job.status == JobStatus.SUCCEEDED and job.url.endswith("/bytes/100")
    monkeypatch.undo()
    assert api.delete(f"{JOBS}/{job_id}").status_code == 204
    assert _stored() == []


def test_a_body_served_to_another_tenant_stays_until_the_last_job_naming_it_is_erased(
    make_tenant, target, storage_kind
):
    (a, _, api_a), (b, _, api_b) = make_tenant(), make_tenant()
    Tenant.objects.filter(id__in=[a.id, b.id]).update(share_fetches=True)
    fetched_id = _submit(api_a, target.url("/bytes/500"), max_age_s=600)
    _run(fetched_id)
    served_id = _submit(api_b, target.url("/bytes/500"), max_age_s=600)
    _run(served_id)
    fetched, served = Job.objects.get(id=fetched_id), Job.objects.get(id=served_id)
    assert served.status == JobStatus.SUCCEEDED and served.result_key == fetched.result_key
    body = _download(api_b.get(f"{JOBS}/{served_id}/result").json()["url"], storage_kind)

    assert api_a.delete(f"{JOBS}/{fetched_id}").status_code == 204

    assert _stored() == [served.result_key]
    link = api_b.get(f"{JOBS}/{served_id}/result").json()["url"]
    assert _download(link, storage_kind) == body and len(body) == 500
    assert api_b.delete(f"{JOBS}/{served_id}").status_code == 204
    assert _stored() == []
    assert results_storage().exists(served.result_key) is False
