"""The client's models are the service's OpenAPI document (FR-24): a field the API has and the
client does not, or the reverse, fails here; so does a constraint the client checks differently."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import random
import re
import string
from pathlib import Path

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
        forbidden = set(rule["names"]["not"]["enum"])
        headers = {}
        for _ in range(rng.randint(0, 5)):
            key = "X-" + "".join(rng.choices(token, k=rng.randint(1, 20)))
            if key.lower() not in forbidden:
                headers[key] = "".join(
                    rng.choices(string.printable.replace("\r", "").replace("\n", ""), k=20)
                )
        return headers
    return "".join(rng.choices(string.printable, k=rng.randint(0, 50)))


@pytest.mark.django_db
def test_requests_the_document_describes_are_accepted(make_tenant):
    """What a schema-driven fuzzer does: bodies built from JobCreateInput's stated constraints,
    every optional field in or out, a body only with POST (its anyOf). Each one is a 202. The
    rendering fields are left out: ``render: "browser"`` holds only with GET and ``browser`` only
    with it, rules across fields the document states in words (tests/rendering checks them)."""
    _, _, api = make_tenant()
    rng = random.Random(21)
    fields = _models.JOB_FIELDS
    for n in range(150):
        body = {"url": _sample(rng, "url", fields["url"])}
        for name, rule in fields.items():
            if name not in ("url", "body", "render", "browser") and rng.random() < 0.5:
                body[name] = _sample(rng, name, rule)
        if body.get("method") == "POST" and rng.random() < 0.7:
            body["body"] = _sample(rng, "body", fields["body"])
        r = api.post("/api/v1/jobs", body, format="json")
        assert r.status_code == 202, (n, body, r.content)
