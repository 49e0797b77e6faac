"""POST /api/v1/jobs: FR-1 (submit), NFR-2 (intake latency: query budget), errors of FR-1 to FR-7."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from apps.jobs.models import Job

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs"


def post(client, body, **extra):
    raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post(JOBS, data=raw, content_type=extra.pop("content_type", "application/json"), **extra)


def test_a_valid_submission_is_accepted_with_a_receipt_and_a_location(api):
    r = post(api, {"url": "https://Example.COM/page?q=1"})
    assert r.status_code == 202, r.content
    body = r.json()
    assert body["status"] == "queued"
    assert set(body) == {"id", "status", "links"}
    assert body["links"]["self"] == f"http://testserver/api/v1/jobs/{body['id']}"
    assert body["links"]["result"] == f"http://testserver/api/v1/jobs/{body['id']}/result"
    assert r["Location"] == body["links"]["self"]
    assert "Idempotent-Replayed" not in r
    job = Job.objects.get(id=body["id"])
    assert job.published_at is None  # the outbox
    assert (job.method, job.priority, job.max_attempts, job.timeout_s, job.max_age_s) == (
        "GET",
        "normal",
        5,
        30,
        0,
    )
    assert job.domain == "example.com"
    assert job.headers == {} and job.body is None and job.callback_url is None


def test_every_field_is_stored_as_given(api):
    r = post(
        api,
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
    )
    assert r.status_code == 202, r.content
    job = Job.objects.get(id=r.json()["id"])
    assert job.domain == "xn--bcher-kva.example"
    assert job.method == "POST" and job.body == "a=1" and job.priority == "high"
    assert job.headers == {"X-Token": "abc", "Accept": ""}
    assert job.callback_url == "https://hooks.example/cb"
    assert (job.max_attempts, job.attempt_budget, job.timeout_s, job.max_age_s) == (20, 20, 300, 2_592_000)


def test_the_lower_bounds_are_accepted(api):
    r = post(api, {"url": "http://a.example", "max_attempts": 1, "timeout_s": 1, "max_age_s": 0})
    assert r.status_code == 202, r.content


MALFORMED = [
    pytest.param(b"{not json", "application/json", "parse_error", None, id="invalid-json"),
    pytest.param(b"[1, 2]", "application/json", "invalid", "non_field_errors", id="json-array"),
    pytest.param(b'"http://a.example"', "application/json", "invalid", "non_field_errors", id="json-string"),
    pytest.param(
        b"[" * 50_000 + b"]" * 50_000, "application/json", "parse_error", None, id="nested-too-deep"
    ),
    pytest.param(b"\xff\xfe{}", "application/json", "parse_error", None, id="not-utf8"),
    pytest.param(b'{"url": NaN}', "application/json", "parse_error", None, id="nan"),
    pytest.param({}, None, "invalid", "url", id="missing-url"),
    pytest.param({"url": ""}, None, "invalid", "url", id="empty-url"),
    pytest.param({"url": 42}, None, "invalid", "url", id="url-not-a-string"),
    pytest.param({"url": "ftp://a.example/f"}, None, "invalid", "url", id="ftp-scheme"),
    pytest.param({"url": "javascript:alert(1)"}, None, "invalid", "url", id="javascript-scheme"),
    pytest.param({"url": "http:///nohost"}, None, "invalid", "url", id="url-without-host"),
    pytest.param({"url": "a.example/page"}, None, "invalid", "url", id="url-without-scheme"),
    pytest.param({"url": "http://a.example:99999/"}, None, "invalid", "url", id="port-out-of-range"),
    pytest.param({"url": "http://a.example/a b"}, None, "invalid", "url", id="url-with-space"),
    pytest.param({"url": "http://a.example/" + "x" * 8200}, None, "invalid", "url", id="url-too-long"),
    pytest.param(
        {"url": "http://a.example", "method": "DELETE"}, None, "invalid", "method", id="method-delete"
    ),
    pytest.param({"url": "http://a.example", "method": 1}, None, "invalid", "method", id="method-number"),
    pytest.param(
        {"url": "http://a.example", "headers": ["A: b"]}, None, "invalid", "headers", id="headers-list"
    ),
    pytest.param(
        {"url": "http://a.example", "headers": {"A": 1}}, None, "invalid", "headers", id="header-int"
    ),
    pytest.param(
        {"url": "http://a.example", "headers": {"Host": "x"}}, None, "invalid", "headers", id="host"
    ),
    pytest.param(
        {"url": "http://a.example", "headers": {"Content-Length": "5"}}, None, "invalid", "headers", id="clen"
    ),
    pytest.param(
        {"url": "http://a.example", "headers": {"A B": "x"}}, None, "invalid", "headers", id="hdr-name"
    ),
    pytest.param(
        {"url": "http://a.example", "headers": {"A": "x\r\nEvil: 1"}}, None, "invalid", "headers", id="crlf"
    ),
    pytest.param(
        {"url": "http://a.example", "headers": {f"H{i}": "v" for i in range(51)}},
        None,
        "invalid",
        "headers",
        id="too-many-headers",
    ),
    pytest.param({"url": "http://a.example", "body": "x"}, None, "invalid", "body", id="body-with-get"),
    pytest.param(
        {"url": "http://a.example", "method": "POST", "body": {"a": 1}},
        None,
        "invalid",
        "body",
        id="body-object",
    ),
    pytest.param(
        {"url": "http://a.example", "priority": "urgent"}, None, "invalid", "priority", id="priority"
    ),
    pytest.param(
        {"url": "http://a.example", "max_attempts": 0}, None, "invalid", "max_attempts", id="attempts-0"
    ),
    pytest.param(
        {"url": "http://a.example", "max_attempts": 21}, None, "invalid", "max_attempts", id="att-21"
    ),
    pytest.param(
        {"url": "http://a.example", "max_attempts": "5"}, None, "invalid", "max_attempts", id="att-str"
    ),
    pytest.param(
        {"url": "http://a.example", "max_attempts": 2.5}, None, "invalid", "max_attempts", id="att-float"
    ),
    pytest.param(
        {"url": "http://a.example", "max_attempts": True}, None, "invalid", "max_attempts", id="att-bool"
    ),
    pytest.param({"url": "http://a.example", "timeout_s": 0}, None, "invalid", "timeout_s", id="timeout-0"),
    pytest.param(
        {"url": "http://a.example", "timeout_s": 301}, None, "invalid", "timeout_s", id="timeout-301"
    ),
    pytest.param(
        {"url": "http://a.example", "max_age_s": -1}, None, "invalid", "max_age_s", id="max-age-neg"
    ),
    pytest.param(
        {"url": "http://a.example", "max_age_s": 2_592_001}, None, "invalid", "max_age_s", id="age-big"
    ),
    pytest.param(
        {"url": "http://a.example", "callback_url": "mailto:a@b.c"},
        None,
        "invalid",
        "callback_url",
        id="cb-mailto",
    ),
    pytest.param(
        {"url": "http://a.example", "callback_url": 5}, None, "invalid", "callback_url", id="cb-int"
    ),
    pytest.param({"url": "http://a.example", "colour": "red"}, None, "invalid", "colour", id="unknown-field"),
    pytest.param({"url": "http://a.example", "headers": None}, None, "invalid", "headers", id="headers-null"),
    pytest.param({"url": "http://" + "a" * 60 + ".example" * 30}, None, "invalid", "url", id="host-too-long"),
    pytest.param({"url": "http://a..example/"}, None, "invalid", "url", id="empty-host-label"),
    pytest.param(
        b'{"url": "http://a.example/\\ud800"}', "application/json", "invalid", "url", id="surrogate"
    ),
    pytest.param(
        {"url": "http://a.example", "method": "POST", "body": "a\u0000b"},
        None,
        "invalid",
        "body",
        id="nul-in-body",
    ),
    pytest.param({"url": None}, None, "invalid", "url", id="url-null"),
]


@pytest.mark.parametrize(("body", "content_type", "code", "field"), MALFORMED)
def test_a_malformed_submission_is_a_400_that_creates_nothing(api, body, content_type, code, field):
    before = Job.objects.count()
    r = post(api, body, content_type=content_type or "application/json")
    assert r.status_code == 400, r.content
    err = r.json()
    assert err["code"] == code
    assert err["type"] == ("validation_error" if code == "invalid" else "invalid_request")
    assert err["detail"]
    if field is not None:
        assert field in err["fields"], err
        assert all(isinstance(m, str) for m in err["fields"][field])
    assert Job.objects.count() == before


def test_unknown_fields_are_all_named(api):
    r = post(api, {"url": "http://a.example", "zeta": 1, "alpha": 2})
    assert r.status_code == 400
    assert set(r.json()["fields"]) == {"alpha", "zeta"}
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""]
)
def test_a_content_type_other_than_json_is_a_415(api, content_type):
    r = api.generic("POST", JOBS, data=b'{"url": "http://a.example"}', content_type=content_type)
    assert r.status_code == 415, r.content
    assert r.json()["code"] == "unsupported_media_type"
    assert Job.objects.count() == 0


@override_settings(SCRAPEJOBS_MAX_REQUEST_BYTES=2048)
def test_a_body_over_the_size_limit_is_a_413(api):
    body = json.dumps({"url": "http://a.example", "method": "POST", "body": "x" * 3000})
    r = post(api, body)
    assert r.status_code == 413, r.content
    assert r.json() == {
        "type": "invalid_request",
        "code": "payload_too_large",
        "detail": "The request body is over 2048 bytes.",
    }
    assert Job.objects.count() == 0


def test_a_submission_without_a_token_is_a_401(make_tenant):
    from rest_framework.test import APIClient

    make_tenant()
    r = post(APIClient(), {"url": "http://a.example"})
    assert r.status_code == 401
    assert r.json()["code"] == "not_authenticated"
    assert r["WWW-Authenticate"].startswith("Bearer")
    assert Job.objects.count() == 0


@pytest.mark.parametrize("header", ["Bearer sj_wrong", "Basic dXNlcjpwYXNz", "Bearer", "Token abc"])
def test_a_submission_with_a_bad_token_is_a_401(make_tenant, header):
    from rest_framework.test import APIClient

    make_tenant()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    r = post(client, {"url": "http://a.example"})
    assert r.status_code == 401
    assert r.json()["type"] == "authentication_error"
    assert Job.objects.count() == 0


def test_a_revoked_token_is_a_401(make_tenant):
    from django.utils import timezone

    from apps.tenants.models import ApiToken

    tenant, _, client = make_tenant()
    ApiToken.objects.filter(tenant=tenant).update(revoked_at=timezone.now())
    assert post(client, {"url": "http://a.example"}).status_code == 401


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_other_methods_on_the_collection_are_a_405(api, method):
    r = getattr(api, method)(JOBS, data="{}", content_type="application/json")
    assert r.status_code == 405
    assert r.json()["code"] == "method_not_allowed"


@override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False)
@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://10.1.2.3:8080/x",
        "http://192.168.0.1/",
        "http://172.16.5.4/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://[fe80::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://0.0.0.0/",
        "http://localhost:8000/",
        "http://api.localhost/",
    ],
)
def test_a_literal_private_address_is_refused_when_private_targets_are_not_allowed(api, url):
    for body in ({"url": url}, {"url": "https://public.example/", "callback_url": url}):
        r = post(api, body)
        assert r.status_code == 400, (body, r.content)
        assert set(r.json()["fields"]) == {next(k for k, v in body.items() if v == url)}
    assert Job.objects.count() == 0


@override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False)
def test_a_public_address_and_a_name_pass_intake_when_private_targets_are_not_allowed(api):
    assert post(api, {"url": "http://93.184.215.14/"}).status_code == 202
    # Names are resolved and checked by the worker on the address it connects to.
    assert (
        post(api, {"url": "http://internal.example/", "callback_url": "https://hooks.example/"}).status_code
        == 202
    )


@override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=True)
def test_a_private_address_is_accepted_when_the_operator_allows_it(api):
    assert post(api, {"url": "http://127.0.0.1:9/", "callback_url": "http://10.0.0.1/cb"}).status_code == 202


def test_a_submission_costs_the_token_lookup_and_one_insert(api, django_assert_max_num_queries):
    post(api, {"url": "http://warm.example"})  # first request loads code paths, not queries
    # token lookup + SAVEPOINT / INSERT / RELEASE (job_create's atomic block inside the test's
    # transaction; in autocommit production it is BEGIN / INSERT / COMMIT).
    with django_assert_max_num_queries(4) as captured:
        r = post(api, {"url": "http://a.example", "headers": {"A": "b"}})
    assert r.status_code == 202
    inserts = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 1
