"""The error shape of FR-1 to FR-7 everywhere: 401, 404 for unknown API paths, 429 with
Retry-After (FR-1 (submit), NFR-6 (tenant isolation))."""

from __future__ import annotations

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", JOBS),
        ("post", JOBS),
        ("get", f"{JOBS}/0190b7a0-0000-7000-8000-000000000000"),
        ("get", f"{JOBS}/0190b7a0-0000-7000-8000-000000000000/attempts"),
        ("get", f"{JOBS}/0190b7a0-0000-7000-8000-000000000000/result"),
        ("post", f"{JOBS}/0190b7a0-0000-7000-8000-000000000000/cancel"),
    ],
)
def test_every_job_call_without_a_token_is_a_401_in_the_error_shape(method, path):
    r = getattr(APIClient(), method)(path)
    assert r.status_code == 401
    assert r.json() == {
        "type": "authentication_error",
        "code": "not_authenticated",
        "detail": "Authentication credentials were not provided.",
    }


def test_an_unknown_api_path_is_a_json_404():
    r = APIClient().get("/api/v1/nothing-here")
    assert r.status_code == 404
    assert r.json() == {"type": "not_found", "code": "not_found", "detail": "No such resource."}


def test_a_path_outside_the_api_keeps_djangos_404_page():
    r = APIClient().get("/nothing-here")
    assert r.status_code == 404
    assert not r["Content-Type"].startswith("application/json")


@override_settings(SCRAPEJOBS_RATE_LIMIT_BURST=3)
def test_a_token_over_its_rate_is_a_429_with_retry_after(make_tenant):
    tenant, _, api = make_tenant(rate_limit_per_second=1)
    codes = [api.get(JOBS).status_code for _ in range(6)]
    assert codes[:3] == [200, 200, 200]
    assert 429 in codes[3:]
    r = api.get(JOBS)
    assert r.status_code == 429
    assert r.json()["type"] == "rate_limited"
    assert r.json()["code"] == "rate_limited"
    assert int(r["Retry-After"]) >= 1
    # Another tenant's token has its own bucket.
    _, _, other = make_tenant(rate_limit_per_second=1)
    assert other.get(JOBS).status_code == 200


@override_settings(SCRAPEJOBS_RATE_LIMIT_BURST=1)
def test_a_rate_limited_submission_creates_nothing(make_tenant):
    from apps.jobs.models import Job

    _, _, api = make_tenant(rate_limit_per_second=1)
    body = {"url": "http://a.example/"}
    first = api.post(JOBS, body, format="json")
    second = api.post(JOBS, body, format="json")
    assert (first.status_code, second.status_code) == (202, 429)
    assert Job.objects.count() == 1


def test_an_unexpected_failure_inside_a_view_is_a_json_500_not_a_traceback(make_tenant, monkeypatch):
    from apps.query import selectors

    def broken(**kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(selectors, "job_list", broken)
    _, _, api = make_tenant()
    r = api.get(JOBS)
    assert r.status_code == 500
    assert r.json() == {"type": "server_error", "code": "internal_error", "detail": "Internal server error."}
    assert b"boom" not in r.content
