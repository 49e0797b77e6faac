"""The client's models are the service's OpenAPI document (FR-24): a field the API has and the
client does not, or the reverse, fails here; so does a constraint the client checks differently."""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import json
import random
import re
import string
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from rest_framework.test import APIClient
from scrapejobs_client import _models
from scrapejobs_client._core import job_body
from scrapejobs_client.errors import InvalidRequest

ROOT = Path(__file__).resolve().parents[2]
DOC = json.loads((ROOT / "tests" / "api" / "openapi.json").read_text())
SCHEMAS = DOC["components"]["schemas"]


def _generator():
    spec = importlib.util.spec_from_file_location(
        "generate_models", ROOT / "clients/python/tools/generate_models.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_models_are_what_the_committed_document_generates():
    gen = _generator()
    assert (ROOT / "clients/python/src/scrapejobs_client/_models.py").read_text() == gen.generate(DOC), (
        "run: python clients/python/tools/generate_models.py"
    )


@pytest.mark.parametrize("schema_name", sorted(_generator().MODELS))
def test_every_answer_field_is_a_model_field_and_the_reverse(schema_name):
    model = getattr(_models, _generator().MODELS[schema_name])
    wire = {model._wire.get(f.name, f.name) for f in dataclasses.fields(model) if f.name != "raw"}
    assert wire == set(SCHEMAS[schema_name]["properties"])


@pytest.mark.django_db
def test_the_schema_served_by_the_api_is_the_committed_one():
    served = APIClient().get("/api/v1/schema", {"format": "json"})
    assert served.status_code == 200
    assert json.loads(served.content)["components"]["schemas"] == SCHEMAS


def test_the_document_states_the_constraints_the_client_checks():
    job = SCHEMAS["JobCreateInput"]
    assert job["additionalProperties"] is False
    assert job["properties"]["url"]["pattern"].startswith("^[hH][tT][tT][pP][sS]?://")
    assert job["properties"]["headers"]["maxProperties"] == 50
    assert set(_models.JOB_FIELDS) == set(job["properties"])
    with pytest.raises(InvalidRequest) as refused:
        job_body(
            "mailto:x@example.com",
            {"max_attempts": 21, "timeout_s": 0, "priority": "urgent", "headers": {"Host": "x"}, "body": "b"},
        )
    assert set(refused.value.fields) == {"url", "max_attempts", "timeout_s", "priority", "headers", "body"}
    assert job_body("https://example.com/", {"method": "POST", "body": "x", "max_age_s": 60})["url"]


def _sample(rng: random.Random, name: str, rule: dict) -> object:
    """A value the document allows for one field, drawn from its stated constraints."""
    if "enum" in rule:
        return rng.choice(rule["enum"])
    if rule["type"] == "integer":
        return rng.randint(rule["minimum"], rule["maximum"])
    if rule["type"] == "boolean":
        return rng.random() < 0.5
    if rule["type"] == "array":
        choices = _resolve(rule["items"])["enum"]
        return rng.sample(choices, rng.randint(0, min(rule["maxItems"], len(choices))))
    if name in ("browser", "viewport"):
        return _object(rng, rule)
    if name == "wait_for_selector":
        size = rng.randint(rule["minLength"], rule["maxLength"])
        return "".join(rng.choices([chr(c) for c in range(1, 0x800)], k=size))
    if name in ("url", "callback_url"):
        labels = [
            "".join(rng.choices(string.ascii_letters + string.digits + "-", k=rng.randint(1, 12)))
            for _ in range(rng.randint(0, 3))
        ]
        host = ".".join(
            [*labels, rng.choice(string.ascii_letters) + "".join(rng.choices(string.ascii_lowercase, k=3))]
        )
        port = f":{rng.randint(1, 9999)}" if rng.random() < 0.3 else ""
        tail = "/" + "".join(rng.choices([chr(c) for c in range(33, 127)], k=rng.randint(0, 40)))
        url = rng.choice(["http", "https", "HTTPS"]) + "://" + host + port + tail
        assert re.fullmatch(rule["pattern"], url), url
        return url
    if rule["type"] == "object":
        token = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
        forbidden = set((rule.get("names") or rule["x-propertyNames"])["not"]["enum"])
        headers = {}
        for _ in range(rng.randint(0, 5)):
            key = "X-" + "".join(rng.choices(token, k=rng.randint(1, 20)))
            if key.lower() not in forbidden:
                headers[key] = "".join(
                    rng.choices(string.printable.replace("\r", "").replace("\n", ""), k=20)
                )
        return headers
    return "".join(rng.choices(string.printable, k=rng.randint(0, 50)))


def _resolve(rule: dict) -> dict:
    """A property's schema with its ``$ref`` (or drf-spectacular's ``allOf: [$ref]``) followed."""
    if "$ref" in rule:
        return SCHEMAS[rule["$ref"].rsplit("/", 1)[1]]
    if "allOf" in rule and len(rule["allOf"]) == 1 and "$ref" in rule["allOf"][0]:
        return {
            **SCHEMAS[rule["allOf"][0]["$ref"].rsplit("/", 1)[1]],
            **{k: v for k, v in rule.items() if k != "allOf"},
        }
    return rule


def _holds(rule: dict, value: dict) -> bool:
    """The document's rules across fields (``anyOf`` / ``allOf`` / ``not`` of ``required`` and
    ``properties: {name: {enum}}``), read as JSON Schema reads them: an absent property holds."""
    if "allOf" in rule and not all(_holds(r, value) for r in rule["allOf"]):
        return False
    if "anyOf" in rule and not any(_holds(r, value) for r in rule["anyOf"]):
        return False
    if "not" in rule and _holds(rule["not"], value):
        return False
    if not set(rule.get("required", ())) <= set(value):
        return False
    return all(
        name not in value or "enum" not in sub or value[name] in sub["enum"]
        for name, sub in rule.get("properties", {}).items()
    )


def _object(rng: random.Random, rule: dict) -> dict:
    """An object the document allows: each optional property in or out, each value from its rule."""
    rule = _resolve(rule)
    assert rule.get("additionalProperties") is False, "unknown fields are refused: the document says so"
    return {
        name: _sample(rng, name, _resolve(sub))
        for name, sub in rule["properties"].items()
        if name in rule.get("required", ()) or rng.random() < 0.5
    }


def _job(rng: random.Random, *, attempts: int = 1000) -> dict:
    """A JobCreateInput body drawn from its stated constraints, every field in or out, kept only
    when it holds the document's rules across fields (a body only with POST, render "browser" only
    with GET, browser options only with it)."""
    job = SCHEMAS["JobCreateInput"]
    for _ in range(attempts):
        body = {"url": _sample(rng, "url", job["properties"]["url"])}
        for name, rule in job["properties"].items():
            if name != "url" and rng.random() < 0.4:
                body[name] = _sample(rng, name, _resolve(rule))
        if _holds(job, body):
            return body
    raise AssertionError("the document's rules across fields hold for almost no body")


def _cursor(rng: random.Random, rule: dict) -> str:
    form = re.fullmatch(r"\^\[(.+)\]\{(\d+)\}\$", rule["pattern"])
    assert form, rule["pattern"]
    alphabet, length = form.groups()
    chars = string.ascii_letters + string.digits + "".join(c for c in alphabet if c in "_-")
    value = "".join(rng.choices(chars, k=int(length)))
    assert re.fullmatch(rule["pattern"], value)
    return value


def _parameters(path: str, method: str, where: str) -> dict[str, dict]:
    return {
        p["name"]: p["schema"] for p in DOC["paths"][path][method].get("parameters", []) if p["in"] == where
    }


@pytest.mark.django_db
def test_requests_the_document_describes_are_accepted(make_tenant):
    """What a schema-driven fuzzer does with POST /jobs: bodies built from JobCreateInput's stated
    constraints, every optional field in or out (rendering too), each kept only when it holds the
    document's rules across fields. Each one is a 202."""
    _, _, api = make_tenant()
    rng = random.Random(21)
    for n in range(200):
        body = _job(rng)
        r = api.post("/api/v1/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY=f"fuzz-{n}")
        assert r.status_code == 202, (n, body, r.content)


@pytest.mark.django_db
def test_job_lists_the_document_describes_are_answered(make_tenant):
    """GET /jobs with its query parameters drawn from the document (enums, bounds, the cursor's
    form, a batch or crawl id): a page, or 404 for a batch or crawl the caller has not got; never a
    400."""
    _, _, api = make_tenant()
    rng = random.Random(21)
    params = _parameters("/api/v1/jobs", "get", "query")
    for n in range(150):
        query = {}
        for name, rule in params.items():
            if rng.random() < 0.5:
                if name == "cursor":
                    query[name] = _cursor(rng, rule)
                elif name in ("batch", "crawl"):
                    assert rule["format"] == "uuid"
                    query[name] = str(uuid.UUID(int=rng.getrandbits(128)))
                else:
                    query[name] = _sample(rng, name, rule)
        r = api.get("/api/v1/jobs", query)
        assert r.status_code == (404 if {"batch", "crawl"} & set(query) else 200), (n, query, r.content)
        assert str(r.status_code) in DOC["paths"]["/api/v1/jobs"]["get"]["responses"]


@pytest.mark.django_db
def test_batches_the_document_describes_are_accepted(make_tenant, settings, tmp_path):
    """POST /batches as the document describes it: a JSON list of JobCreateInput rows drawn as
    above, or the multipart form with its required file (here JSON lines named by its extension),
    with or without a callback_url drawn from its stated pattern. Each one is a 202."""
    backend = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path), "allow_overwrite": True},
    }
    settings.STORAGES = {**settings.STORAGES, "default": backend, "results": backend}
    settings.SCRAPEJOBS_TENANT_MAX_BATCHES_IN_PROGRESS = 0  # no loader runs here
    _, _, api = make_tenant()
    rng = random.Random(21)
    operation = DOC["paths"]["/api/v1/batches"]["post"]
    content = operation["requestBody"]["content"]
    rows_rule = content["application/json"]["schema"]
    form = content["multipart/form-data"]["schema"]
    callback_rule = _parameters("/api/v1/batches", "post", "query")["callback_url"]
    for n in range(40):
        rows = [_job(rng) for _ in range(rng.randint(rows_rule["minItems"], 5))]
        query = (
            f"?callback_url={quote(_sample(rng, 'url', callback_rule), safe='')}"
            if rng.random() < 0.5
            else ""
        )
        key = {"HTTP_IDEMPOTENCY_KEY": f"fuzz-{n}"}
        if rng.random() < 0.5:
            r = api.post(f"/api/v1/batches{query}", rows, format="json", **key)
        else:
            upload = io.BytesIO("\n".join(json.dumps(row) for row in rows).encode())
            upload.name = "jobs.jsonl"
            r = api.post(
                f"/api/v1/batches{query}",
                {name: upload for name in form["required"]},
                format="multipart",
                **key,
            )
        assert r.status_code == 202, (n, query, rows, r.content)
        assert r.json()["rejected"] == 0, r.json()["rejected_rows"]
