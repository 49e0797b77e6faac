"""GET /api/v1/jobs: FR-3 (list): newest first, filters, a cursor walk never repeats or skips."""

from __future__ import annotations

import pytest

from apps.api.pagination import cursor_encode
from apps.jobs.models import Job
from tests.query import helpers

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs"


def walk(api, **params):
    """Every page of a walk; returns (ids in order, number of pages)."""
    seen: list[str] = []
    pages = 0
    cursor = None
    while True:
        query = dict(params, **({"cursor": cursor} if cursor else {}))
        r = api.get(JOBS, query)
        assert r.status_code == 200, r.content
        body = r.json()
        pages += 1
        seen += [item["id"] for item in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return seen, pages
        assert pages < 1000


def test_an_empty_list_has_no_items_and_no_cursor(api):
    assert api.get(JOBS).json() == {"items": [], "next_cursor": None}


def test_jobs_come_newest_first_in_the_same_shape_as_a_single_job(make_tenant):
    tenant, _, api = make_tenant()
    jobs = [helpers.queued(tenant, url=f"http://a.example/{i}") for i in range(3)]
    body = api.get(JOBS).json()
    assert [i["id"] for i in body["items"]] == [str(j.id) for j in reversed(jobs)]
    assert body["items"][0] == api.get(f"{JOBS}/{jobs[-1].id}").json()
    assert body["next_cursor"] is None


def test_a_cursor_walk_over_many_pages_sees_every_job_exactly_once_even_while_jobs_are_added(make_tenant):
    tenant, _, api = make_tenant()
    existing = [helpers.queued(tenant, url=f"http://a.example/{i}") for i in range(230)]
    seen: list[str] = []
    cursor = None
    added = []
    pages = 0
    while True:
        r = api.get(JOBS, {"limit": 50, **({"cursor": cursor} if cursor else {})})
        body = r.json()
        pages += 1
        assert len(body["items"]) <= 50
        seen += [i["id"] for i in body["items"]]
        # Jobs submitted during the walk are newer than the cursor: they must not show up in it,
        # nor push an already-seen job onto the next page.
        added += [helpers.queued(tenant, url=f"http://a.example/new-{pages}-{k}") for k in range(7)]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 5
    assert len(seen) == len(set(seen)) == 230
    assert seen == [str(j.id) for j in reversed(existing)]
    # A fresh walk sees everything, the late jobs first.
    all_ids, _ = walk(api, limit=500)
    assert all_ids[: len(added)] == [str(j.id) for j in reversed(added)]
    assert len(all_ids) == 230 + len(added)


def test_a_walk_whose_last_page_is_exactly_full_ends_with_an_empty_cursor_or_page(make_tenant):
    tenant, _, api = make_tenant()
    for i in range(100):
        helpers.queued(tenant, url=f"http://a.example/{i}")
    ids, pages = walk(api, limit=50)
    assert len(ids) == len(set(ids)) == 100
    assert pages == 2


def test_the_limit_defaults_to_50(make_tenant):
    tenant, _, api = make_tenant()
    for i in range(51):
        helpers.queued(tenant, url=f"http://a.example/{i}")
    body = api.get(JOBS).json()
    assert len(body["items"]) == 50
    assert body["next_cursor"]


def test_filters_by_status_and_priority_walk_only_matching_jobs(make_tenant):
    tenant, _, api = make_tenant()
    high = [helpers.queued(tenant, priority="high") for _ in range(5)]
    low = [helpers.queued(tenant, priority="low") for _ in range(3)]
    done = helpers.succeeded(tenant, priority="high")
    ids, _ = walk(api, priority="high", status="queued", limit=2)
    assert ids == [str(j.id) for j in reversed(high)]
    assert walk(api, priority="low")[0] == [str(j.id) for j in reversed(low)]
    assert walk(api, status="succeeded")[0] == [str(done.id)]
    assert walk(api, status="failed")[0] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "done"}, "status"),
        ({"priority": "urgent"}, "priority"),
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"cursor": "!!!"}, "cursor"),
        ({"cursor": "abc"}, "cursor"),
        ({"cursor": "x" * 40}, "cursor"),
        ({"sort": "id"}, "sort"),
    ],
)
def test_a_bad_list_parameter_is_a_400_naming_it(api, params, field):
    r = api.get(JOBS, params)
    assert r.status_code == 400, r.content
    assert r.json()["type"] == "validation_error"
    assert field in r.json()["fields"]


def test_a_well_formed_batch_id_the_caller_has_not_got_is_a_404_not_an_empty_page(api):
    r = api.get(JOBS, {"batch": "0190b7a0-0000-7000-8000-000000000000"})
    assert r.status_code == 404, r.content
    assert r.json()["code"] == "not_found"


def test_the_limit_bounds_are_accepted(make_tenant):
    tenant, _, api = make_tenant()
    helpers.queued(tenant)
    assert api.get(JOBS, {"limit": "1"}).status_code == 200
    assert api.get(JOBS, {"limit": "500"}).status_code == 200


def test_a_cursor_past_the_oldest_job_gives_an_empty_page(make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.queued(tenant)
    body = api.get(JOBS, {"cursor": cursor_encode(job.id)}).json()
    assert body == {"items": [], "next_cursor": None}


def test_a_page_costs_the_token_lookup_and_one_select(make_tenant, django_assert_num_queries):
    tenant, _, api = make_tenant()
    for _ in range(20):
        helpers.queued(tenant)
    with django_assert_num_queries(2):
        assert len(api.get(JOBS, {"limit": 10}).json()["items"]) == 10
    assert Job.objects.count() == 20
