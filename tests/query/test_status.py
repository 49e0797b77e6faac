"""GET /jobs/{id}, /attempts, /result and POST /cancel: FR-2 (status), FR-4 (history),
FR-5 (result), FR-6 (cancel)."""

from __future__ import annotations

import time
import uuid

import pytest

from apps.jobs.claims import job_claim
from apps.jobs.models import Job
from apps.redis_clients import cancel_flag_key, state_redis
from tests.query import helpers

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs"


def test_a_new_job_reads_back_queued_with_every_contract_field(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.queued(tenant, url="http://a.example/page", priority="low", max_attempts=3)
    r = api.get(f"{JOBS}/{job.id}")
    assert r.status_code == 200
    body = r.json()
    assert body == {
        "id": str(job.id),
        "url": "http://a.example/page",
        "method": "GET",
        "status": "queued",
        "priority": "low",
        "render": "none",
        "attempts": 0,
        "max_attempts": 3,
        "last_error": None,
        "created_at": body["created_at"],
        "started_at": None,
        "finished_at": None,
        "result_expired": False,
        "waiting_for": "tenant_share",
        "waiting_until": None,
        "final_url": None,
        "batch": None,
        "batch_row": None,
        "changed": None,
        "previous_job": None,
        "links": {
            "self": f"http://testserver/api/v1/jobs/{job.id}",
            "result": f"http://testserver/api/v1/jobs/{job.id}/result",
            "attempts": f"http://testserver/api/v1/jobs/{job.id}/attempts",
            "cancel": f"http://testserver/api/v1/jobs/{job.id}/cancel",
        },
    }
    assert body["created_at"].endswith("Z")


def test_a_failed_job_shows_its_last_error(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.failed(tenant)
    body = api.get(f"{JOBS}/{job.id}").json()
    assert body["status"] == "failed"
    assert body["attempts"] == 1
    assert body["last_error"] == {"class": "http_404", "message": "Not Found", "http_status": 404}
    assert body["started_at"] and body["finished_at"]


@pytest.mark.parametrize("job_id", ["not-a-uuid", "8750a0e2-9aa1-4d0e-813c-f96dc7c3cda3", "0" * 36])
def test_an_unknown_or_malformed_id_is_a_json_404(api, job_id):
    for path in ("", "/attempts", "/result"):
        r = api.get(f"{JOBS}/{job_id}{path}")
        assert r.status_code == 404, path
        assert r.json() == {"type": "not_found", "code": "not_found", "detail": "No such job."}
    r = api.post(f"{JOBS}/{job_id}/cancel")
    assert r.status_code == 404
    assert r.json()["code"] == "not_found"


@pytest.mark.parametrize("wait", ["-1", "31", "abc", "1.5"])
def test_a_wait_outside_0_to_30_is_a_400(make_tenant, wait):
    tenant, _, api = make_tenant()
    job = helpers.queued(tenant)
    r = api.get(f"{JOBS}/{job.id}", {"wait": wait})
    assert r.status_code == 400
    assert "wait" in r.json()["fields"]


def test_an_unknown_query_parameter_on_a_job_is_a_400(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.queued(tenant)
    r = api.get(f"{JOBS}/{job.id}", {"wiat": "5"})
    assert r.status_code == 400
    assert r.json()["fields"] == {"wiat": ["Unknown query parameter."]}


def test_a_job_read_costs_the_token_lookup_and_one_select(make_tenant, django_assert_num_queries):
    tenant, _, api = make_tenant()
    job = helpers.queued(tenant)
    with django_assert_num_queries(2):
        assert api.get(f"{JOBS}/{job.id}").status_code == 200


# --- attempts -------------------------------------------------------------------------------


def test_attempts_list_every_try_in_order(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.running(tenant, max_attempts=3)
    helpers.finish(
        job, outcome="failed_temporary", http_status=503, error_class="http_503", error="Unavailable"
    )
    Job.objects.filter(id=job.id).update(not_before=None)  # skip the retry wait
    assert job_claim(job_id=job.id, worker="w-2") is not None
    helpers.finish(job, outcome="succeeded", http_status=200)
    r = api.get(f"{JOBS}/{job.id}/attempts")
    assert r.status_code == 200
    items = r.json()["items"]
    assert [a["number"] for a in items] == [1, 2]
    assert items[0]["outcome"] == "failed_temporary"
    assert items[0]["http_status"] == 503
    assert items[0]["error_class"] == "http_503"
    assert items[0]["error"] == "Unavailable"
    assert items[0]["duration_ms"] == 12
    assert items[1]["outcome"] == "succeeded"
    assert set(items[0]) == {
        "number",
        "started_at",
        "finished_at",
        "outcome",
        "http_status",
        "error_class",
        "error",
        "duration_ms",
        "subrequests",
        "served_from",
        "revalidated_from",
    }
    assert items[0]["served_from"] is None  # fetched, not served from another job's fetch


def test_a_queued_job_has_no_attempts(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.queued(tenant)
    assert api.get(f"{JOBS}/{job.id}/attempts").json() == {"items": []}


def test_a_running_attempt_shows_without_an_outcome(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.running(tenant)
    [item] = api.get(f"{JOBS}/{job.id}/attempts").json()["items"]
    assert item["number"] == 1 and item["outcome"] is None and item["finished_at"] is None


# --- result ---------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [helpers.queued, helpers.running, helpers.failed])
def test_a_result_is_a_409_until_the_job_succeeded(make_tenant, make):
    tenant, _, api = make_tenant()
    job = make(tenant)
    r = api.get(f"{JOBS}/{job.id}/result")
    assert r.status_code == 409
    assert r.json()["code"] == "job_not_succeeded"
    assert r.json()["type"] == "conflict"


def test_a_cancelled_jobs_result_is_a_409(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.queued(tenant)
    api.post(f"{JOBS}/{job.id}/cancel")
    assert api.get(f"{JOBS}/{job.id}/result").status_code == 409


def test_a_succeeded_job_whose_result_was_removed_is_a_410(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.succeeded(tenant)
    # What retention does: the object goes, then the key.
    Job.objects.filter(id=job.id).update(result_key=None)
    r = api.get(f"{JOBS}/{job.id}/result")
    assert r.status_code == 410
    assert r.json() == {
        "type": "gone",
        "code": "result_expired",
        "detail": "The result was removed by retention.",
    }


# --- cancel ---------------------------------------------------------------------------------


def test_cancelling_a_queued_job_is_final_at_once(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.queued(tenant)
    r = api.post(f"{JOBS}/{job.id}/cancel")
    assert r.status_code == 200
    assert r.json() == {"id": str(job.id), "status": "cancelled"}
    assert api.get(f"{JOBS}/{job.id}").json()["status"] == "cancelled"
    assert job_claim(job_id=job.id, worker="w") is None


def test_cancelling_a_running_job_asks_its_worker_to_stop(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.running(tenant)
    r = api.post(f"{JOBS}/{job.id}/cancel")
    assert r.status_code == 202
    assert r.json() == {"id": str(job.id), "status": "running", "cancel_requested": True}
    assert state_redis().get(cancel_flag_key(str(job.id), 1)) == "1"
    assert Job.objects.get(id=job.id).cancel_requested_at is not None
    # The worker's next receipt ends it cancelled, whatever its outcome.
    assert helpers.finish(job, outcome="failed_temporary").status == "cancelled"


@pytest.mark.parametrize("make", [helpers.succeeded, helpers.failed])
def test_cancelling_a_final_job_is_a_409(make_tenant, make):
    tenant, _, api = make_tenant()
    job = make(tenant)
    before = Job.objects.get(id=job.id)
    r = api.post(f"{JOBS}/{job.id}/cancel")
    assert r.status_code == 409
    assert r.json()["code"] == "job_final"
    after = Job.objects.get(id=job.id)
    assert (after.status, after.finished_at) == (before.status, before.finished_at)


def test_cancelling_twice_is_a_409_the_second_time(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.queued(tenant)
    assert api.post(f"{JOBS}/{job.id}/cancel").status_code == 200
    assert api.post(f"{JOBS}/{job.id}/cancel").status_code == 409


def test_cancel_answers_get_with_a_405(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.queued(tenant)
    assert api.get(f"{JOBS}/{job.id}/cancel").status_code == 405
    # DELETE /jobs/{id} erases a final job (FR-52): a queued one is a conflict, not a 405.
    assert api.delete(f"{JOBS}/{job.id}").status_code == 409
    assert api.put(f"{JOBS}/{job.id}").status_code == 405


def test_timestamps_are_utc_iso_8601(make_tenant):
    from datetime import datetime

    tenant, _, api = make_tenant()
    job = helpers.succeeded(tenant)
    body = api.get(f"{JOBS}/{job.id}").json()
    for field in ("created_at", "started_at", "finished_at"):
        parsed = datetime.fromisoformat(body[field].replace("Z", "+00:00"))
        assert parsed.utcoffset().total_seconds() == 0
        assert abs(parsed.timestamp() - time.time()) < 60


def test_a_succeeded_job_gives_a_signed_link_that_works_without_the_token(make_tenant, tmp_path, settings):
    from django.core.files.base import ContentFile
    from rest_framework.test import APIClient

    from apps.results.storage import results_storage

    tenant, _, api = make_tenant()
    key = f"test/{uuid.uuid4()}"
    results_storage().save(key, ContentFile(b"hello"))
    try:
        job = helpers.succeeded(tenant, key=key)
        r = api.get(f"{JOBS}/{job.id}/result")
        assert r.status_code == 200, r.content
        body = r.json()
        assert set(body) == {
            "url",
            "expires_at",
            "size",
            "sha256",
            "content_type",
            "http_status",
            "screenshot",
            "headers",
        }
        assert body["screenshot"] is None  # a plain job
        assert (body["size"], body["sha256"], body["content_type"], body["http_status"]) == (
            5,
            "ab" * 32,
            "text/plain",
            200,
        )
        assert body["expires_at"].endswith("Z")
        download = APIClient().get(body["url"].removeprefix("http://testserver"))
        assert download.status_code == 200
        assert b"".join(download.streaming_content if download.streaming else [download.content]) == b"hello"
    finally:
        results_storage().delete(key)


def test_a_succeeded_job_whose_stored_object_is_gone_is_a_410(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.succeeded(tenant, key=f"test/{uuid.uuid4()}/never-written")
    r = api.get(f"{JOBS}/{job.id}/result")
    assert r.status_code == 410
    assert r.json()["code"] == "result_expired"
