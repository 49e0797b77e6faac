"""A job's public view is declared once (apps/api/job_view.py; docs/development.md, "Adding a field
to a job"): the JSON answer, the OpenAPI document's JobOutput (and so the client's generated
models), the columns the reads load and the row the read cache keeps, which the fast read answers
from, all follow from ``JOB_VIEW``. A field added to the declaration alone shows in every one of
them: a stand-in declaration with one field more proves it, end to end (real PostgreSQL and Redis,
the ASGI application called in-process)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.urls import path
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers as drf
from rest_framework.request import Request
from rest_framework.views import APIView

import scrapejobs.asgi
from apps.api import serializers as api_serializers
from apps.api.job_view import JOB_VIEW, JobField, column, job_view_columns, job_view_serializer
from apps.api.serializers import JobOutput
from apps.jobs.models import Job
from apps.query import cache, selectors
from apps.redis_clients import READ_CACHE_SEP, job_read_cache_key
from tests.query import helpers
from tests.query.test_fast_read import call

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = json.loads((ROOT / "tests" / "api" / "openapi.json").read_text())

# The field the stand-in declaration adds: a column of the row no field of the view reads yet.
STAND_IN_FIELD = column(
    "http_status",
    lambda: drf.IntegerField(allow_null=True, help_text="The target's HTTP status."),
    source="result_http_status",
)
STAND_IN = (*JOB_VIEW, STAND_IN_FIELD)


def _names(view: tuple[JobField, ...]) -> list[str]:
    return [field.name for field in view]


def _cached_row(job: Job) -> dict[str, Any]:
    raw = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True).get(job_read_cache_key(job.id))
    assert isinstance(raw, str) and raw, "the job is not in the read cache"
    _version, _, text = raw.partition(READ_CACHE_SEP)
    return json.loads(text)["row"]


async def _no_django(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError(f"Django was asked for {scope['path']}: the fast read did not answer")


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "generate_models", ROOT / "clients/python/tools/generate_models.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _component(serializer: type[drf.Serializer]) -> dict[str, Any]:
    """The OpenAPI document's components for a view answering ``serializer``, made as
    `make schema` makes the whole document (drf-spectacular)."""

    class Detail(APIView):
        @extend_schema(responses={200: serializer})
        def get(self, request: Request, job_id: str) -> None: ...

    generator = SchemaGenerator(patterns=[path("jobs/<str:job_id>", Detail.as_view())])
    return generator.get_schema(request=None, public=True)["components"]["schemas"]


def test_what_the_view_gives_is_derived_from_the_declaration_not_copied():
    names = _names(JOB_VIEW)
    assert list(JobOutput().fields) == names
    # The committed document's order is the answer's (the JSON keys follow the same declaration).
    assert list(SNAPSHOT["components"]["schemas"]["JobOutput"]["properties"]) == names
    assert selectors.JOB_COLUMNS == job_view_columns(JOB_VIEW) + ("version",)
    assert cache.JOB_COLUMNS is selectors.JOB_COLUMNS
    assert api_serializers.JOB_VIEW is JOB_VIEW
    attnames = {f.attname for f in Job._meta.concrete_fields}
    for field in JOB_VIEW:
        assert field.columns and set(field.columns) <= attnames, field.name
    assert len(set(names)) == len(names)


@pytest.mark.django_db(transaction=True)
def test_every_field_is_in_every_answer_in_order_and_its_columns_in_the_cached_row(make_tenant, monkeypatch):
    tenant, token, api = make_tenant()
    job = helpers.failed(tenant)
    names = _names(JOB_VIEW)
    at = f"/api/v1/jobs/{job.id}"
    status, _, from_db = call(scrapejobs.asgi.application, at, token=token)  # Django's path; fills the caches
    assert status == 200 and list(json.loads(from_db)) == names
    assert set(_cached_row(job)) == set(selectors.JOB_COLUMNS)
    monkeypatch.setattr(scrapejobs.asgi, "django_application", _no_django)
    status, _, fast = call(scrapejobs.asgi.application, at, token=token)
    assert status == 200 and list(json.loads(fast)) == names and json.loads(fast) == json.loads(from_db)
    [item] = api.get("/api/v1/jobs").json()["items"]
    assert list(item) == names


@pytest.fixture
def stand_in(monkeypatch):
    """STAND_IN in force, from the next request on, wherever a module holds what it derives from
    JOB_VIEW at import (the test above checks these are all of them, and derived): the answer's
    declaration, the columns the reads load and the cache keeps."""

    def switch_on() -> None:
        columns = job_view_columns(STAND_IN) + ("version",)
        monkeypatch.setattr(api_serializers, "JOB_VIEW", STAND_IN)
        monkeypatch.setattr(selectors, "JOB_COLUMNS", columns)
        monkeypatch.setattr(cache, "JOB_COLUMNS", columns)

    return switch_on


@pytest.mark.django_db(transaction=True)
def test_a_field_added_to_the_declaration_alone_shows_everywhere(make_tenant, monkeypatch, stand_in):
    tenant, token, api = make_tenant()
    job = helpers.succeeded(tenant)  # its result's HTTP status: 200
    at = f"/api/v1/jobs/{job.id}"
    assert call(scrapejobs.asgi.application, at, token=token)[0] == 200  # cached under the view as it was
    stand_in()

    # The reads load its column; an entry kept before it joined is a miss, never a deferred read.
    loaded = selectors.job_get(tenant_id=tenant.id, job_id=job.id)
    assert loaded is not None and "result_http_status" not in loaded.get_deferred_fields()
    assert cache.job_cached(tenant_id=tenant.id, job_id=job.id) is None
    status, _, from_db = call(scrapejobs.asgi.application, at, token=token)
    assert status == 200 and json.loads(from_db)["http_status"] == 200
    assert list(json.loads(from_db)) == _names(STAND_IN)
    # The cache keeps its column, and the fast read answers it from there.
    assert _cached_row(job)["result_http_status"] == 200
    monkeypatch.setattr(scrapejobs.asgi, "django_application", _no_django)
    status, _, fast = call(scrapejobs.asgi.application, at, token=token)
    assert status == 200 and json.loads(fast) == json.loads(from_db)
    # The list.
    [item] = api.get("/api/v1/jobs").json()["items"]
    assert item["http_status"] == 200 and list(item) == _names(STAND_IN)

    # The OpenAPI document's JobOutput, and so the client's Job model.
    output = job_view_serializer(STAND_IN, name="JobOutput")
    assert list(output().fields) == _names(STAND_IN)
    components = _component(output)
    assert components["JobOutput"]["properties"]["http_status"] == {
        "type": "integer",
        "nullable": True,
        "description": "The target's HTTP status.",
    }
    schemas = SNAPSHOT["components"]["schemas"]
    doc = {
        **SNAPSHOT,
        "components": {
            **SNAPSHOT["components"],
            "schemas": {**components, **schemas, "JobOutput": components["JobOutput"]},
        },
    }
    models = _generator().generate(doc)
    job_model = models[models.index("class Job(Model):") :].split("\n\n")[0]
    assert "    http_status: int | None\n" in job_model
