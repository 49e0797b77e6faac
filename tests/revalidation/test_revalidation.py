"""Re-fetching (FR-33 to FR-35, docs/revalidation.md): a job with ``revalidate`` asks the target
with the validators of the tenant's previous success of the same request; a 304 keeps that body
(same SHA-256, nothing stored); ``changed`` and ``previous_job`` say whether the body changed;
``callback_on: "change"`` announces only a change. Jobs in through the HTTP API, the worker's own
attempt function and the writer's fold in this process, a real local target honouring (or
ignoring) conditional requests, rows and API answers out."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from apps.jobs.models import Attempt, Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.results.storage import results_storage, storage_files_under
from apps.results.storage_retention import retention_run
from apps.scraping.attempt import job_run_attempt
from apps.webhooks.models import WebhookDelivery
from apps.webhooks.services import webhooks_enqueue_final
from tests.support.conditional_target import ConditionalTarget

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = "/api/v1/jobs"


@pytest.fixture
def page() -> Iterator[ConditionalTarget]:
    server = ConditionalTarget(size=4096).start()
    try:
        yield server
    finally:
        server.stop()


def _run(api, url: str, **fields) -> dict:
    """POST the job, run its attempt as a worker does (the publisher's message for a job with
    max_age_s 0 says so: no decision read), fold its receipt; the job as GET /jobs/{id} says."""
    r = api.post(JOBS, {"url": url, **fields}, format="json")
    assert r.status_code == 202, r.content
    job_id = r.json()["id"]
    receipt = job_run_attempt(job_id=job_id, worker="w:1:1", max_age_s=fields.get("max_age_s", 0))
    assert receipt is not None
    assert attempts_apply_finished([receipt]).applied == 1
    got = api.get(f"{JOBS}/{job_id}")
    assert got.status_code == 200
    return got.json()


def _attempts(api, job_id: str) -> list[dict]:
    return api.get(f"{JOBS}/{job_id}/attempts").json()["items"]


def _stored_bodies() -> set[str]:
    return {k for k in storage_files_under("results") if "/.spool/" not in k}


def test_a_304_serves_the_earlier_body_with_the_same_sha256_and_stores_nothing_new(make_tenant, page):
    _, _, api = make_tenant()
    url = page.url("price")
    first = _run(api, url, revalidate=True)
    assert (first["status"], first["changed"], first["previous_job"]) == ("succeeded", True, None)
    stored = _stored_bodies()

    second = _run(api, url, revalidate=True)
    assert second["status"] == "succeeded", second["last_error"]
    assert (second["changed"], second["previous_job"]) == (False, first["id"])
    sent = page.requests_for("price")[-1]
    assert sent["if-none-match"] == page.etag(page.body("price"))
    assert page.not_modified == 1
    assert _stored_bodies() == stored  # nothing new in storage
    a, b = Job.objects.get(id=first["id"]), Job.objects.get(id=second["id"])
    assert (b.result_key, b.result_sha256, b.result_size) == (a.result_key, a.result_sha256, a.result_size)
    assert b.result_stored_at == a.result_stored_at  # its age is the earlier fetch's
    [attempt] = _attempts(api, second["id"])
    assert (attempt["http_status"], attempt["revalidated_from"]) == (304, first["id"])
    result = api.get(f"{JOBS}/{second['id']}/result").json()
    assert (result["sha256"], result["http_status"]) == (a.result_sha256, 200)


def test_a_server_that_ignores_the_condition_still_works(make_tenant, page):
    page.honour = False
    _, _, api = make_tenant()
    url = page.url("always")
    first = _run(api, url, revalidate=True)
    second = _run(api, url, revalidate=True)
    assert second["status"] == "succeeded"
    assert "if-none-match" in page.requests_for("always")[-1]  # asked, and answered 200 anyway
    assert (second["changed"], second["previous_job"]) == (False, first["id"])  # same body
    [attempt] = _attempts(api, second["id"])
    assert (attempt["http_status"], attempt["revalidated_from"]) == (200, None)
    assert Job.objects.get(id=second["id"]).result_key != Job.objects.get(id=first["id"]).result_key


def test_a_changed_page_is_changed_true(make_tenant, page):
    _, _, api = make_tenant()
    url = page.url("news")
    page.pages["news"] = b"<p>monday</p>"
    first = _run(api, url, revalidate=True)
    page.pages["news"] = b"<p>tuesday</p>"
    second = _run(api, url, revalidate=True)
    assert (second["status"], second["changed"], second["previous_job"]) == ("succeeded", True, first["id"])
    assert page.not_modified == 0
    listed = api.get(JOBS, {"changed": "true"}).json()["items"]
    assert [j["id"] for j in listed] == [second["id"], first["id"]]
    assert api.get(JOBS, {"changed": "false"}).json()["items"] == []
    assert api.get(JOBS, {"changed": "yes"}).status_code == 400


def test_a_weak_etag_is_sent_back_as_given(make_tenant, page):
    page.weak = True
    _, _, api = make_tenant()
    url = page.url("weak")
    _run(api, url, revalidate=True)
    second = _run(api, url, revalidate=True)
    sent = page.requests_for("weak")[-1]
    assert sent["if-none-match"].startswith('W/"')
    assert sent["if-none-match"] == page.etag(page.body("weak"))
    assert sent["if-modified-since"]  # Last-Modified sent back too
    assert second["changed"] is False and _attempts(api, second["id"])[0]["http_status"] == 304


def test_an_earlier_body_removed_by_retention_leads_to_an_unconditional_fetch(make_tenant, page):
    _, _, api = make_tenant()
    url = page.url("old")
    first = _run(api, url, revalidate=True)
    later = timezone.now() + timedelta(days=settings.SCRAPEJOBS_RESULT_RETENTION_DAYS + 1)
    assert retention_run(now=later).results_deleted == 1
    second = _run(api, url, revalidate=True)
    assert second["status"] == "succeeded"
    sent = page.requests_for("old")[-1]
    assert "if-none-match" not in sent and "if-modified-since" not in sent
    assert page.not_modified == 0
    assert (second["changed"], second["previous_job"]) == (False, first["id"])  # compared by SHA-256
    job = Job.objects.get(id=second["id"])
    assert results_storage().exists(job.result_key)
    assert api.get(f"{JOBS}/{second['id']}/result").status_code == 200


def test_an_earlier_body_gone_from_storage_leads_to_an_unconditional_fetch(make_tenant, page):
    _, _, api = make_tenant()
    url = page.url("erased")
    first = _run(api, url, revalidate=True)
    results_storage().delete(Job.objects.get(id=first["id"]).result_key)
    second = _run(api, url, revalidate=True)
    assert "if-none-match" not in page.requests_for("erased")[-1]
    assert results_storage().exists(Job.objects.get(id=second["id"]).result_key)


def test_a_callback_on_change_job_with_an_unchanged_body_sends_no_webhook(make_tenant, page):
    _, _, api = make_tenant()
    url = page.url("watch")
    hook = "http://127.0.0.1:9/hook"
    first = _run(api, url, revalidate=True, callback_url=hook, callback_on="change")
    unchanged = _run(api, url, revalidate=True, callback_url=hook, callback_on="change")
    page.pages["watch"] = b"new"
    changed = _run(api, url, callback_url=hook, callback_on="change")  # compared, not revalidated
    webhooks_enqueue_final()
    bodies = {str(d.job_id): d.body for d in WebhookDelivery.objects.all()}
    assert set(bodies) == {first["id"], changed["id"]}  # a first fetch counts as a change
    assert unchanged["changed"] is False
    assert f'"changed":true,"previous_job":"{unchanged["id"]}"' in bodies[changed["id"]]


def test_a_plain_job_is_neither_compared_nor_revalidated(make_tenant, page):
    _, _, api = make_tenant()
    url = page.url("plain")
    _run(api, url)
    second = _run(api, url)
    assert (second["changed"], second["previous_job"]) == (None, None)
    assert "if-none-match" not in page.requests_for("plain")[-1]
    assert Attempt.objects.get(job_id=second["id"]).revalidated_from is None
    job = Job.objects.get(id=second["id"])
    assert (job.revalidate, job.callback_on) == (None, None)  # the row carries nothing more


def test_revalidation_also_works_for_a_job_decided_by_single_flight(make_tenant, page):
    _, _, api = make_tenant()
    url = page.url("aged")
    first = _run(api, url, revalidate=True, max_age_s=1)
    Job.objects.filter(id=first["id"]).update(
        finished_at=timezone.now() - timedelta(seconds=5),
        result_stored_at=timezone.now() - timedelta(seconds=5),
    )
    second = _run(api, url, revalidate=True, max_age_s=1)
    assert second["status"] == JobStatus.SUCCEEDED
    assert _attempts(api, second["id"])[0]["revalidated_from"] == first["id"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"revalidate": "yes"}, "revalidate"),
        ({"revalidate": True, "render": "browser"}, "revalidate"),
        ({"callback_on": "change"}, "callback_on"),
        ({"callback_on": "sometimes", "callback_url": "http://127.0.0.1:9/h"}, "callback_on"),
    ],
)
def test_bad_revalidation_fields_are_400_and_create_nothing(make_tenant, fields, field):
    _, _, api = make_tenant()
    r = api.post(JOBS, {"url": "http://127.0.0.1:9/x", **fields}, format="json")
    assert r.status_code == 400, r.content
    assert field in r.json()["fields"]
    assert not Job.objects.exists()


def test_304s_are_counted_in_the_attempt_history_and_in_metrics(make_tenant, page):
    from apps.operators.rollup_runner import rollup_run
    from tests.operators.test_metrics import scrape, value

    _, _, api = make_tenant()
    url = page.url("counted")
    _run(api, url, revalidate=True)
    for _ in range(2):
        _run(api, url, revalidate=True)
    assert rollup_run(settle_s=0) == 3
    samples = scrape()
    assert value(samples, "scrapejobs_attempts_total", outcome="succeeded", error_class="not_modified") == 2
    assert value(samples, "scrapejobs_attempts_total", outcome="succeeded", error_class="") == 1
    assert value(samples, "scrapejobs_not_modified_bytes_total") == 2 * 4096  # two kept 4 KiB bodies


def test_a_job_s_own_if_none_match_is_sent_as_given_and_its_304_served(make_tenant, page):
    _, _, api = make_tenant()
    url = page.url("own")
    etag = page.etag(page.body("own"))
    first = _run(api, url, revalidate=True, headers={"If-None-Match": etag})
    assert first["status"] == "failed"  # nothing earlier to keep: a 304 is no answer then
    page.honour = False
    ok = _run(api, url, revalidate=True, headers={"If-None-Match": etag})
    page.honour = True
    second = _run(api, url, revalidate=True, headers={"If-None-Match": etag})
    assert page.requests_for("own")[-1]["if-none-match"] == etag
    assert (second["status"], second["changed"], second["previous_job"]) == ("succeeded", False, ok["id"])
