"""NFR-6 (tenant isolation): another tenant's job is a 404 in every call, and never listed."""

from __future__ import annotations

import pytest

from apps.jobs.models import Job
from apps.tenants.services import token_cache_clear
from tests.query import helpers

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs"
NOT_FOUND = {"type": "not_found", "code": "not_found", "detail": "No such job."}


@pytest.fixture
def two_tenants(make_tenant):
    owner, _, owner_api = make_tenant()
    _, _, stranger_api = make_tenant()
    return owner, owner_api, stranger_api


@pytest.mark.parametrize("make", [helpers.queued, helpers.running, helpers.succeeded, helpers.failed])
def test_another_tenants_job_is_not_found_by_any_read(two_tenants, make):
    owner, owner_api, stranger = two_tenants
    job = make(owner)
    for path in (f"{JOBS}/{job.id}", f"{JOBS}/{job.id}/attempts", f"{JOBS}/{job.id}/result"):
        r = stranger.get(path)
        assert (r.status_code, r.json()) == (404, NOT_FOUND), path
        assert owner_api.get(path).status_code != 404, path


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("make", [helpers.queued, helpers.succeeded])
def test_another_tenants_job_is_not_found_by_a_wait(two_tenants, make):
    """A wait reads on a thread of the shared executor, through a connection of its own: the
    tenants and the job are committed (transaction=True), as they are in service. In a test's
    open transaction that thread cannot see the stranger's token once the process's token cache
    has been cleared (the revocation listener clears it whenever it starts listening), and
    answered 401 instead of the 404 under test."""
    owner, owner_api, stranger = two_tenants
    job = make(owner)
    token_cache_clear()  # the wait's thread looks the token up itself, as after a listener's start
    r = stranger.get(f"{JOBS}/{job.id}", {"wait": 1})
    assert (r.status_code, r.json()) == (404, NOT_FOUND)
    assert owner_api.get(f"{JOBS}/{job.id}", {"wait": 1}).status_code == 200


@pytest.mark.parametrize("make", [helpers.queued, helpers.running, helpers.succeeded])
def test_another_tenant_cannot_cancel_a_job_nor_learn_that_it_exists(two_tenants, make):
    owner, _, stranger = two_tenants
    job = make(owner)
    before = Job.objects.get(id=job.id)
    r = stranger.post(f"{JOBS}/{job.id}/cancel")
    assert (r.status_code, r.json()) == (404, NOT_FOUND)
    after = Job.objects.get(id=job.id)
    assert (after.status, after.cancel_requested_at) == (before.status, before.cancel_requested_at)


def test_the_list_shows_only_the_callers_jobs(two_tenants, make_tenant):
    owner, owner_api, stranger = two_tenants
    mine = [helpers.queued(owner) for _ in range(3)]
    assert stranger.get(JOBS).json() == {"items": [], "next_cursor": None}
    for status in ("queued", "running", "succeeded"):
        assert stranger.get(JOBS, {"status": status}).json()["items"] == []
    assert [i["id"] for i in owner_api.get(JOBS).json()["items"]] == [str(j.id) for j in reversed(mine)]


def test_a_cursor_from_another_tenants_walk_shows_nothing_of_theirs(two_tenants):
    owner, owner_api, stranger = two_tenants
    for _ in range(4):
        helpers.queued(owner)
    cursor = owner_api.get(JOBS, {"limit": 1}).json()["next_cursor"]
    assert stranger.get(JOBS, {"cursor": cursor}).json()["items"] == []
