"""The job's representation names the URL that gave its result after redirects, and its result
carries the target's response headers (FR-25): both travel in the result's receipt, are folded
by the writer, copied to jobs served the same fetch (single-flight); a receipt of the older
layout still decodes."""

from __future__ import annotations

import json

import pytest

from apps.admin_mixins import MASK
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.jobs.receipts import receipt_decode, receipt_encode
from apps.jobs.singleflight import job_fetch_decide
from apps.scraping.attempt import job_run_attempt
from apps.scraping.fetched import MAX_KEPT_HEADERS, response_headers_kept
from tests.support.factories import job_make

pytestmark = pytest.mark.django_db


def _run(job_id):
    receipt = job_run_attempt(job_id=job_id, worker="w:1:1")
    assert receipt is not None
    # Through the wire format, as the writer reads it.
    attempts_apply_finished([receipt_decode(receipt_encode(receipt))])
    return receipt


def test_a_redirected_job_shows_the_url_that_answered_and_a_plain_one_its_own(make_tenant, target):
    tenant, _, api = make_tenant()
    redirected = job_make(tenant, target.url("/redirect/2"))
    plain = job_make(tenant, target.url("/bytes/10"))
    queued = job_make(tenant, target.url("/bytes/11"))

    assert _run(redirected.id).result.final_url == target.url("/redirect/0")
    assert _run(plain.id).result.final_url is None  # a null in the receipt, not the URL again

    assert api.get(f"/api/v1/jobs/{redirected.id}").json()["final_url"] == target.url("/redirect/0")
    assert api.get(f"/api/v1/jobs/{plain.id}").json()["final_url"] == target.url("/bytes/10")
    assert api.get(f"/api/v1/jobs/{queued.id}").json()["final_url"] is None
    listed = {j["id"]: j["final_url"] for j in api.get("/api/v1/jobs").json()["items"]}
    assert listed[str(redirected.id)] == target.url("/redirect/0")


def test_a_job_served_another_jobs_fetch_shows_that_fetchs_final_url(make_tenant, target):
    tenant, _, api = make_tenant()
    first = job_make(tenant, target.url("/redirect/1"), max_age_s=3600)
    _run(first.id)
    second = job_make(tenant, target.url("/redirect/1"), max_age_s=3600)
    assert job_fetch_decide(job_id=second.id).kind == "served"  # the worker's first decision
    answer = api.get(f"/api/v1/jobs/{second.id}").json()
    assert answer["status"] == "succeeded", answer
    assert answer["final_url"] == target.url("/redirect/0")
    served = api.get(f"/api/v1/jobs/{second.id}/result").json()["headers"]
    assert served == api.get(f"/api/v1/jobs/{first.id}/result").json()["headers"] != {}


def test_a_receipt_of_the_older_layout_still_decodes(make_tenant, target):
    tenant, _, _ = make_tenant()
    job = job_make(tenant, target.url("/redirect/1"))
    compact = json.loads(receipt_encode(job_run_attempt(job_id=job.id, worker="w:1:1")))
    assert compact[11][5] == target.url("/redirect/0")
    compact[11] = compact[11][:5]  # what a worker of the previous release sends
    assert receipt_decode(json.dumps(compact)).result.final_url is None


def test_the_result_carries_the_targets_response_headers_bounded_and_masked(make_tenant, target):
    tenant, _, api = make_tenant()
    job = job_make(tenant, target.url("/bytes/33"))
    _run(job.id)
    result = api.get(f"/api/v1/jobs/{job.id}/result").json()
    assert result["headers"]["content-type"] == "application/octet-stream"
    assert result["headers"]["content-length"] == "33"

    kept = response_headers_kept(
        [("Set-Cookie", "sid=1"), ("Set-Cookie", "b=2"), ("X-Auth-Token", "t"), ("ETag", '"x"')]
        + [(f"X-H{n}", "v" * 5000) for n in range(200)]
    )
    assert kept["set-cookie"] == kept["x-auth-token"] == MASK and kept["etag"] == '"x"'
    assert len(kept) <= MAX_KEPT_HEADERS and all(len(v) <= 1024 for v in kept.values())
    assert sum(len(k) + len(v) for k, v in kept.items()) <= 16 * 1024
