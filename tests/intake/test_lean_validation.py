"""The lean path of POST /jobs against the serializer it stands in for: it accepts
exactly what JobCreateInput accepts, with the same validated data (so the same job and the same
idempotency fingerprint), and leaves everything else to the serializer's answer."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from django.test import override_settings

from apps.intake import serializers as intake_serializers
from apps.intake.lean import job_create_input_lean
from apps.intake.serializers import JobCreateInput, request_fingerprint
from apps.jobs.models import Job
from tests.intake.test_submit import MALFORMED

JOBS = "/api/v1/jobs"

VALID = [
    {"url": "https://Example.COM/page?q=1"},
    {"url": "http://a.example", "max_attempts": 1, "timeout_s": 1, "max_age_s": 0},
    {
        "url": "http://bücher.example/x",
        "method": "POST",
        "headers": {"X-Token": "abc", "Accept": ""},
        "body": "a=1",
        "priority": "high",
        "callback_url": "https://hooks.example/cb",
        "max_attempts": 20,
        "timeout_s": 300,
        "max_age_s": 2_592_000,
    },
    {"url": "http://a.example/", "method": "POST", "body": ""},
    {"url": "http://a.example/", "body": None, "callback_url": None},
    {"url": "http://a.example/é", "headers": {"X-E": "ü"}},
    {"url": "http://127.0.0.1:9/", "callback_url": "http://10.0.0.1/cb"},
]

# Values per field, good and bad, combined at random below.
POOL: dict[str, list[object]] = {
    "url": [
        "http://a.example/",
        "https://x.example:8443/p?q#f",
        "http://[::1]/",
        "http://localhost/",
        "ftp://a.example/",
        "",
        " http://a.example/",
        "http://a.example/\u2028",
        "http://a.example/\ud800",
        "http://a.example/\x00",
        "http:///x",
        "http://a.example:0/",
        "http://a.example:65536/",
        "http://" + "a" * 300 + ".example/",
        "http://a.example/" + "x" * 8200,
        None,
        5,
        ["http://a.example/"],
    ],
    "method": ["GET", "HEAD", "POST", "get", "", None, 1, "DELETE"],
    "headers": [
        {},
        {"A": "b"},
        {"A": ""},
        {"A": "x" * 8193},
        {"A": "\ud800"},
        {"A": "a\x00b"},
        {"A": "a\nb"},
        {"Host": "h"},
        {"X Y": "z"},
        {"A": 1},
        {"A": None},
        None,
        [],
        "A: b",
        {f"H{i}": "v" for i in range(50)},
        {f"H{i}": "v" for i in range(51)},
    ],
    "body": [None, "", "x", "a\x00b", "\ud800", 5, {"a": 1}, True],
    "priority": ["high", "normal", "low", "", None, "HIGH", 0],
    "callback_url": [None, "https://hooks.example/cb", "", "mailto:a@b.c", "http://10.0.0.1/", 5],
    "max_attempts": [1, 5, 20, 0, 21, -1, "5", 5.0, 2.5, True, False, None, 10**30],
    "timeout_s": [1, 30, 300, 0, 301, "30", 30.0, None],
    "max_age_s": [0, 1, 2_592_000, -1, 2_592_001, "0", None, False],
    "colour": ["red"],
}


def _serializer(data: object) -> dict | None:
    s = JobCreateInput(data=data)
    return dict(s.validated_data) if s.is_valid() else None


def _assert_same(data: object) -> bool:
    expected = _serializer(data)
    got = job_create_input_lean(data)
    assert got == expected, data
    if got is not None:
        assert expected is not None
        assert request_fingerprint(got) == request_fingerprint(expected), data
    return got is not None


@pytest.mark.parametrize("data", VALID)
def test_a_valid_request_gives_the_serializers_validated_data(data: dict) -> None:
    assert _assert_same(data)


@pytest.mark.parametrize(("body", "content_type", "code", "field"), MALFORMED)
def test_every_malformed_request_of_the_contract_is_left_to_the_serializer(body, content_type, code, field):
    if isinstance(body, bytes):
        try:
            body = json.loads(body)
        except (ValueError, RecursionError):
            return  # not JSON: the lean path never gets that far
    assert job_create_input_lean(body) is None
    assert _serializer(body) is None


@pytest.mark.parametrize("private", [True, False])
def test_thousands_of_random_requests_are_judged_as_the_serializer_judges_them(private: bool) -> None:
    rng = random.Random(7)
    fields = list(POOL)
    accepted = 0
    with override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=private):
        for _ in range(3000):
            chosen = rng.sample(fields, rng.randint(0, len(fields)))
            if rng.random() < 0.8 and "url" not in chosen:
                chosen.append("url")
            data = {name: rng.choice(POOL[name]) for name in chosen if name != "colour" or rng.random() < 0.2}
            accepted += _assert_same(data)
        for value in itertools.chain.from_iterable(POOL.values()):
            _assert_same(value)  # not even an object
    assert accepted > 50  # the pools do produce valid requests


@pytest.mark.django_db
def test_an_ordinary_submission_does_not_build_the_serializer(api, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the serializer was built")

    monkeypatch.setattr(intake_serializers.JobCreateInput, "__init__", refuse)
    r = api.post(JOBS, json.dumps(VALID[2]), content_type="application/json", HTTP_IDEMPOTENCY_KEY="k")
    assert r.status_code == 202, r.content
    again = api.post(JOBS, json.dumps(VALID[2]), content_type="application/json", HTTP_IDEMPOTENCY_KEY="k")
    assert again.status_code == 202 and again["Idempotent-Replayed"] == "true"
    conflict = api.post(JOBS, json.dumps(VALID[0]), content_type="application/json", HTTP_IDEMPOTENCY_KEY="k")
    assert conflict.status_code == 422
    assert conflict.json() == {
        "type": "idempotency_error",
        "code": "idempotency_key_reused",
        "detail": "This Idempotency-Key was used with a different request body.",
    }
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_the_lean_answer_is_byte_for_byte_the_drf_answer(api, monkeypatch) -> None:
    from apps.intake.views import JobCreateView

    body = json.dumps({"url": "http://a.example/ü", "headers": {"X-A": "é"}})
    lean = api.post(JOBS, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="same")
    monkeypatch.setattr(JobCreateView, "_post_lean", lambda self, request: None)
    drf = api.post(JOBS, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="same")
    assert (lean.status_code, drf.status_code) == (202, 202)
    assert lean.content == drf.content
    assert {k: v for k, v in lean.items()} == {k: v for k, v in drf.items() if k != "Idempotent-Replayed"}
