"""GET /api/v1/schema and /api/v1/docs: the OpenAPI document is valid, matches what the API
answers, and the docs page is served without any network (FR-1 (submit), FR-2 (status),
FR-3 (list), FR-4 (history), FR-5 (result), FR-6 (cancel))."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.core.management import call_command
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from tests.query import helpers

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema() -> dict:
    r = APIClient().get("/api/v1/schema", {"format": "json"})
    assert r.status_code == 200
    return r.json()


def test_the_schema_is_served_without_a_token_and_is_valid_openapi_3(schema):
    assert schema["openapi"].startswith("3.")
    validate_schema(schema)  # raises on an invalid document
    from openapi_spec_validator import validate

    validate(schema)


def test_the_schema_describes_every_job_operation_with_its_status_codes(schema):
    paths = schema["paths"]
    expected = {
        ("/api/v1/jobs", "post"): {"202", "400", "401", "413", "415", "422", "429"},
        ("/api/v1/jobs", "get"): {"200", "400", "401", "404", "429"},
        ("/api/v1/jobs/{job_id}", "get"): {"200", "400", "401", "404", "410", "429"},
        ("/api/v1/jobs/{job_id}", "delete"): {"204", "401", "404", "409", "429", "503"},
        ("/api/v1/jobs/{job_id}/attempts", "get"): {"200", "401", "404", "410", "429"},
        ("/api/v1/jobs/{job_id}/result", "get"): {"200", "401", "404", "409", "410", "429"},
        ("/api/v1/jobs/{job_id}/cancel", "post"): {"200", "202", "401", "404", "409", "413", "429"},
    }
    for (path, method), codes in expected.items():
        op = paths[path][method]
        assert set(op["responses"]) == codes, (path, method)
        assert op["security"] == [{"bearerToken": []}]
    post = paths["/api/v1/jobs"]["post"]
    assert [p["name"] for p in post["parameters"]] == ["Idempotency-Key"]
    assert set(post["responses"]["202"]["headers"]) == {"Location", "Idempotent-Replayed"}
    assert schema["components"]["securitySchemes"]["bearerToken"]["scheme"] == "bearer"


def test_the_submit_body_in_the_schema_is_exactly_the_accepted_fields(schema):
    body = schema["components"]["schemas"]["JobCreateInput"]
    assert set(body["properties"]) == {
        "url",
        "method",
        "headers",
        "body",
        "priority",
        "callback_url",
        "max_attempts",
        "timeout_s",
        "max_age_s",
        "render",
        "browser",
        "revalidate",
        "callback_on",
    }
    assert body["required"] == ["url"]
    assert (body["properties"]["max_attempts"]["minimum"], body["properties"]["max_attempts"]["maximum"]) == (
        1,
        20,
    )
    assert body["properties"]["timeout_s"]["maximum"] == 300
    assert body["properties"]["max_age_s"]["maximum"] == 2_592_000


def test_answers_have_exactly_the_fields_the_schema_names(schema, make_tenant):
    tenant, _, api = make_tenant()
    job = helpers.failed(tenant)
    components = schema["components"]["schemas"]
    detail = api.get(f"/api/v1/jobs/{job.id}").json()
    assert set(detail) == set(components["JobOutput"]["properties"])
    assert set(detail["links"]) == set(components["JobLinksOutput"]["properties"])
    assert set(detail["last_error"]) == set(components["LastErrorOutput"]["properties"])
    page = api.get("/api/v1/jobs").json()
    assert set(page) == set(components["JobPageOutput"]["properties"])
    [attempt] = api.get(f"/api/v1/jobs/{job.id}/attempts").json()["items"]
    assert set(attempt) == set(components["AttemptOutput"]["properties"])
    created = api.post("/api/v1/jobs", {"url": "http://a.example/"}, format="json").json()
    assert set(created) == set(components["JobCreatedOutput"]["properties"])
    error = api.get("/api/v1/jobs", {"limit": "0"}).json()
    assert set(error) == set(components["ErrorOutput"]["properties"])


def test_the_docs_page_renders_and_loads_only_local_assets():
    r = APIClient().get("/api/v1/docs")
    assert r.status_code == 200
    html = r.content.decode()
    assert "swagger-ui" in html.lower()
    assert "/api/v1/schema" in html
    assert not re.search(r"""(src|href)=["']https?://""", html), "the page must not reach the network"
    assets = re.findall(r"""(?:src|href)=["']/static/([^"'?]+)""", html)
    assert assets, html
    for asset in assets:
        assert finders.find(asset), asset


SNAPSHOT = Path(__file__).with_name("openapi.json")


def test_the_schema_matches_the_committed_snapshot():
    """The API's contract changes only on purpose: a change to a view, a serializer or a field
    that moves the OpenAPI document fails here until `make schema` rewrites the snapshot, so the
    change shows in review (a refactor leaves this file's diff empty)."""
    out = io.StringIO()
    call_command("spectacular", "--format", "openapi-json", stdout=out)
    assert json.loads(out.getvalue()) == json.loads(SNAPSHOT.read_text()), "run `make schema`"


def test_the_schema_lists_the_render_fields_with_their_bounds(schema):
    """FR-30: render and its browser options, in the submit body, the job and /result."""
    schemas = schema["components"]["schemas"]
    body = schemas["JobCreateInput"]["properties"]
    assert body["render"]["default"] == "none"
    options = schemas["BrowserOptionsInput"]["properties"]
    assert set(options) == {"wait_until", "wait_for_selector", "screenshot", "viewport", "block"}
    assert set(schemas["WaitUntilEnum"]["enum"]) == {"load", "domcontentloaded", "networkidle"}
    viewport = schemas["ViewportInput"]["properties"]
    assert (viewport["width"]["minimum"], viewport["width"]["maximum"]) == (320, 3840)
    assert (viewport["height"]["minimum"], viewport["height"]["maximum"]) == (240, 2160)
    assert "render" in schemas["JobOutput"]["properties"]
    assert "screenshot" in schemas["ResultOutput"]["properties"]
    assert "subrequests" in schemas["AttemptOutput"]["properties"]


def test_the_schema_is_built_once_per_process_and_served_from_memory(monkeypatch):
    """Building it walks every view (tens of ms of CPU): not again for each unauthenticated call."""
    from drf_spectacular.generators import SchemaGenerator

    from apps.api import views

    built = []
    real = SchemaGenerator.get_schema

    def counting(self, *args, **kwargs):
        built.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counting)
    monkeypatch.setattr(views, "_built", {})
    answers = [APIClient().get("/api/v1/schema", {"format": "json"}) for _ in range(5)]
    assert [a.status_code for a in answers] == [200] * 5
    assert len({a.content for a in answers}) == 1 and len(built) == 1


def test_the_pages_without_a_token_are_rate_limited_per_client_address(settings):
    settings.SCRAPEJOBS_OPEN_RATE_LIMIT_PER_SECOND = 1
    settings.SCRAPEJOBS_OPEN_RATE_LIMIT_BURST = 3
    one, other = APIClient(REMOTE_ADDR="127.0.0.7"), APIClient(REMOTE_ADDR="127.0.0.8")
    statuses = [one.get(path).status_code for path in ["/api/v1/schema", "/api/v1/docs", "/api/v1/schema"]]
    assert statuses == [200, 200, 200]
    refused = one.get("/api/v1/schema")
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert other.get("/api/v1/schema").status_code == 200  # another address has its own bucket
