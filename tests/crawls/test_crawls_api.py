"""POST /crawls and its reads through HTTP (FR-39, FR-41, docs/crawls.md): the receipt, bad input
refused with nothing created, Idempotency-Key, the cap on max_pages, tenants kept apart, cancel."""

from __future__ import annotations

import pytest
from django.test import override_settings

from apps.crawls.models import Crawl, CrawlPage
from apps.jobs.models import Job

pytestmark = pytest.mark.django_db

START = "http://127.0.0.1:9/site/0"


def _post(api, body, **headers):
    return api.post("/api/v1/crawls", body, format="json", **headers)


def test_a_crawl_is_received_with_its_first_page_as_an_ordinary_job(api):
    r = _post(api, {"seeds": [START], "max_pages": 10, "job": {"priority": "high", "max_attempts": 2}})
    assert r.status_code == 202, r.content
    body = r.json()
    assert r["Location"] == body["links"]["self"]
    assert (body["status"], body["max_pages"], body["max_depth"], body["scope"]) == (
        "running",
        10,
        10,
        "same_origin",
    )
    assert body["pages"]["total"] == 1 and body["pages"]["queued"] == 1
    job = Job.objects.get(batch_id=body["id"])
    assert (job.url, job.batch_row, job.priority, job.max_attempts, job.published_at) == (
        "http://127.0.0.1:9/site/0",
        1,
        "high",
        2,
        None,
    )
    page = CrawlPage.objects.get(crawl_id=body["id"])
    assert (page.seq, page.depth, page.job_id, page.expanded_at) == (1, 0, job.id, None)
    assert api.get(body["links"]["self"]).json()["pages"]["total"] == 1
    jobs = api.get(f"/api/v1/jobs?crawl={body['id']}").json()["items"]
    assert [j["id"] for j in jobs] == [str(job.id)]
    pages = api.get(f"/api/v1/crawls/{body['id']}/pages").json()
    assert pages["items"][0]["job"] == str(job.id) and pages["items"][0]["status"] == "queued"
    listed = api.get("/api/v1/crawls").json()
    assert [c["id"] for c in listed["items"]] == [body["id"]] and listed["next_cursor"] is None


def test_a_crawls_pages_revalidate_when_its_job_options_say_so(api):
    """FR-33 through a crawl: crawling a site again, each page sends the validators of its last
    fetch (tests/revalidation covers what the fetch then does); a bad value is a 400."""
    r = _post(api, {"seeds": [START], "max_pages": 5, "job": {"revalidate": True}})
    assert r.status_code == 202, r.content
    assert Job.objects.get(batch_id=r.json()["id"]).revalidate is True
    plain = _post(api, {"seeds": [START + "?again"], "max_pages": 5})
    assert Job.objects.get(batch_id=plain.json()["id"]).revalidate is None
    bad = _post(api, {"seeds": [START], "max_pages": 5, "job": {"revalidate": "yes"}})
    assert bad.status_code == 400 and "job.revalidate" in bad.json()["fields"], bad.content


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_pages": 10}, "seeds"),
        ({"seeds": [], "max_pages": 10}, "seeds"),
        ({"seeds": START, "max_pages": 10}, "seeds"),
        ({"seeds": [START, "ftp://example.com/"], "max_pages": 10}, "seeds"),
        ({"seeds": [START] * 101, "max_pages": 10}, "seeds"),
        ({"url": START, "max_pages": 10}, "url"),
        ({"seeds": [START]}, "max_pages"),
        ({"seeds": [START], "max_pages": 0}, "max_pages"),
        ({"seeds": [START], "max_pages": "10"}, "max_pages"),
        ({"seeds": [START], "max_pages": 10, "max_depth": 101}, "max_depth"),
        ({"seeds": [START], "max_pages": 10, "scope": "planet"}, "scope"),
        ({"seeds": [START], "max_pages": 10, "include": "/a"}, "include"),
        ({"seeds": [START], "max_pages": 10, "include": ["no-slash"]}, "include"),
        ({"seeds": [START], "max_pages": 10, "exclude": ["/a$b"]}, "exclude"),
        ({"seeds": [START], "max_pages": 10, "exclude": ["/*"] * 21}, "exclude"),
        ({"seeds": [START], "max_pages": 10, "exclude": ["/" + "*" * 11]}, "exclude"),
        ({"seeds": [START], "max_pages": 10, "job": {"method": "POST"}}, "job.method"),
        (
            {"seeds": [START], "max_pages": 10, "job": {"callback_url": "http://x.example/"}},
            "job.callback_url",
        ),
        ({"seeds": [START], "max_pages": 10, "job": {"timeout_s": 0}}, "job.timeout_s"),
        ({"seeds": [START], "max_pages": 10, "job": {"headers": {"Host": "x"}}}, "job.headers"),
        ({"seeds": [START], "max_pages": 10, "callback_url": "gopher://x"}, "callback_url"),
        ({"seeds": [START], "max_pages": 10, "colour": "red"}, "colour"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_creates_nothing(api, body, field):
    r = _post(api, body)
    assert r.status_code == 400, r.content
    assert field in r.json()["fields"], r.json()
    assert not Crawl.objects.exists() and not Job.objects.exists()


def test_max_pages_is_capped_by_the_setting(api):
    with override_settings(SCRAPEJOBS_CRAWL_MAX_PAGES=50):
        r = _post(api, {"seeds": [START], "max_pages": 51})
        assert r.status_code == 400 and "SCRAPEJOBS_CRAWL_MAX_PAGES" in str(r.json()["fields"]["max_pages"])
        assert _post(api, {"seeds": [START], "max_pages": 50}).status_code == 202
    assert Crawl.objects.count() == 1


def test_an_idempotency_key_replays_its_crawl_and_refuses_another_body(api):
    body = {"seeds": [START], "max_pages": 5}
    first = _post(api, body, HTTP_IDEMPOTENCY_KEY="k1")
    again = _post(api, {"max_pages": 5, "seeds": [START], "scope": "same_origin"}, HTTP_IDEMPOTENCY_KEY="k1")
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json()["id"] == first.json()["id"] and again["Idempotent-Replayed"] == "true"
    assert _post(api, {"seeds": [START], "max_pages": 6}, HTTP_IDEMPOTENCY_KEY="k1").status_code == 422
    assert Crawl.objects.count() == 1 and Job.objects.count() == 1


def test_another_tenant_sees_none_of_it(make_tenant):
    _, _, api = make_tenant()
    _, _, other = make_tenant()
    crawl_id = _post(api, {"seeds": [START], "max_pages": 5}).json()["id"]
    assert other.get(f"/api/v1/crawls/{crawl_id}").status_code == 404
    assert other.get(f"/api/v1/crawls/{crawl_id}/pages").status_code == 404
    assert other.post(f"/api/v1/crawls/{crawl_id}/cancel").status_code == 404
    assert other.get(f"/api/v1/jobs?crawl={crawl_id}").status_code == 404
    assert other.get("/api/v1/crawls").json()["items"] == []
    assert Crawl.objects.get(id=crawl_id).status == "running"


def test_cancel_ends_the_crawl_and_cancels_its_queued_jobs_through_the_job_cancel(api):
    crawl_id = _post(api, {"seeds": [START], "max_pages": 5}).json()["id"]
    r = api.post(f"/api/v1/crawls/{crawl_id}/cancel")
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "cancelled" and r.json()["finished_at"] is not None
    assert r.json()["pages"]["cancelled"] == 1
    assert set(Job.objects.filter(batch_id=crawl_id).values_list("status", flat=True)) == {"cancelled"}
    assert api.post(f"/api/v1/crawls/{crawl_id}/cancel").status_code == 409


def test_seeds_are_the_depth_0_pages_each_once_and_within_max_pages(api):
    """FR-39: several seeds, one of them under another spelling of the same URL (the fetch key's
    normalisation), give one page each; max_pages bounds the seeds too."""
    body = _post(
        api, {"seeds": [START, "HTTP://127.0.0.1:9/site/0#top", "http://127.0.0.1:9/other"], "max_pages": 5}
    ).json()
    pages = CrawlPage.objects.filter(crawl_id=body["id"]).order_by("seq")
    assert [(p.url_key, p.depth) for p in pages] == [(START, 0), ("http://127.0.0.1:9/other", 0)]
    assert body["seeds"][1] == "HTTP://127.0.0.1:9/site/0#top" and body["pages"]["total"] == 2
    one = _post(api, {"seeds": [START + "?a", START + "?b", START + "?c"], "max_pages": 1}).json()
    assert one["pages"]["total"] == 1 and Job.objects.filter(batch_id=one["id"]).count() == 1
