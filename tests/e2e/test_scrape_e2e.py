"""Scrape jobs through the HTTP API with the real writer, beat and worker processes running
against local target servers (FR-1 to FR-7, NFR-3; issue 2's "done when")."""

import hashlib
import time
from urllib.parse import urlsplit

import pytest
from django.test import Client

from tests.support.procs import wait_for
from tests.support.target import body_for

pytestmark = pytest.mark.e2e

FINAL = ("succeeded", "failed", "cancelled")


def _submit(api, url: str, **fields) -> str:
    response = api.post("/api/v1/jobs", {"url": url, **fields}, format="json")
    assert response.status_code == 202, response.content
    return response.json()["id"]


def _job(api, job_id: str) -> dict:
    response = api.get(f"/api/v1/jobs/{job_id}")
    assert response.status_code == 200, response.content
    return response.json()


def _final(api, job_id: str, timeout: float = 20) -> dict:
    wait_for(lambda: _job(api, job_id)["status"] in FINAL, timeout, what=f"job {job_id} to finish")
    return _job(api, job_id)


def _attempts(api, job_id: str) -> list[dict]:
    return api.get(f"/api/v1/jobs/{job_id}/attempts").json()["items"]


def _download(api, job_id: str) -> tuple[dict, bytes]:
    result = api.get(f"/api/v1/jobs/{job_id}/result")
    assert result.status_code == 200, result.content
    meta = result.json()
    # The link works without the API token: fetch it with a bare client.
    link = Client().get(urlsplit(meta["url"]).path)
    assert link.status_code == 200
    return meta, b"".join(link.streaming_content)  # type: ignore[attr-defined]  # a FileResponse


def test_jobs_reach_the_final_state_their_target_calls_for(services, api, target):
    # Cancelled while queued, before any worker exists: it must never reach the target.
    never = _submit(api, target.url("/bytes/7"))
    assert api.post(f"/api/v1/jobs/{never}/cancel").json()["status"] == "cancelled"

    services(SCRAPEJOBS_FETCH_MAX_BYTES="200000").start_all(worker_concurrency=10)
    ok = _submit(api, target.url("/bytes/150000"))
    missing = _submit(api, target.url("/status/404"), max_attempts=3)
    slow = _submit(api, target.url("/slow?delay=10"), timeout_s=1, max_attempts=1)
    huge = _submit(api, target.url("/bytes/300000"), max_attempts=3)
    flaky = _submit(api, target.url("/flaky/e2e?fail=1&code=503"), max_attempts=3)
    dripping = _submit(api, target.url("/drip?n=200&delay=0.05"))

    # Cancel the long download once the worker is on it; it stops at its next check.
    wait_for(lambda: target.requests_for("/drip"), 20, what="the drip download to start")
    cancel = api.post(f"/api/v1/jobs/{dripping}/cancel")
    assert cancel.status_code == 202 and cancel.json()["cancel_requested"] is True
    asked = time.monotonic()
    assert _final(api, dripping)["status"] == "cancelled"
    # time is the subject: a stop within 5 s of the cancel, where the drip itself lasts 10 s
    assert time.monotonic() - asked < 5
    assert [a["outcome"] for a in _attempts(api, dripping)] == ["cancelled"]

    job = _final(api, ok)
    assert (job["status"], job["attempts"]) == ("succeeded", 1)
    meta, body = _download(api, ok)
    assert body == body_for(150000)
    assert meta["size"] == 150000 and meta["sha256"] == hashlib.sha256(body_for(150000)).hexdigest()
    assert meta["http_status"] == 200

    job = _final(api, missing)
    assert (job["status"], job["attempts"]) == ("failed", 1)
    assert job["last_error"]["class"] == "http_404" and job["last_error"]["http_status"] == 404
    assert api.get(f"/api/v1/jobs/{missing}/result").status_code == 409

    job = _final(api, slow)
    assert (job["status"], job["last_error"]["class"]) == ("failed", "timeout")

    job = _final(api, huge)
    assert (job["status"], job["attempts"], job["last_error"]["class"]) == ("failed", 1, "body_too_large")

    job = _final(api, flaky)
    assert (job["status"], job["attempts"]) == ("succeeded", 2)
    assert [a["outcome"] for a in _attempts(api, flaky)] == ["failed_temporary", "succeeded"]
    assert _download(api, flaky)[1] == b"ok after 1 failures"

    assert _job(api, never)["status"] == "cancelled" and target.requests_for("/bytes/7") == []


def test_a_worker_refuses_a_private_target_unless_allowed(services, api, target):
    # The API of this test process allows private targets (test settings); the worker does not.
    services(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS="false").start_all(worker_concurrency=10)
    job_id = _submit(api, target.url("/bytes/10"), max_attempts=3)
    job = _final(api, job_id)
    assert (job["status"], job["attempts"], job["last_error"]["class"]) == ("failed", 1, "address_refused")
    assert target.requests == []
