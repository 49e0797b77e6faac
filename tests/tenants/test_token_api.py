"""A tenant's own tokens through the API (FR-36): HTTP in, rows out, real PostgreSQL and Redis."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.test.utils import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from apps.tenants.models import ApiToken, TokenScope
from apps.tenants.services import token_create, token_hash, tokens_last_used_flush

pytestmark = pytest.mark.django_db

TOKENS = "/api/v1/tokens"
JOBS = "/api/v1/jobs"
SCHEMA = Path(__file__).resolve().parents[1] / "api" / "openapi.json"


def _client(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _create(client: APIClient, **body: object):
    return client.post(TOKENS, data={"name": "ci", "scope": "full", **body}, format="json")


def test_a_token_made_before_scopes_is_admin_and_manages_tokens(make_tenant):
    tenant, raw, client = make_tenant()
    assert ApiToken.objects.get(tenant=tenant).scope == TokenScope.ADMIN
    r = client.get(TOKENS)
    assert r.status_code == 200, r.content
    [only] = r.json()["items"]
    assert only["scope"] == "admin" and "token" not in only and raw not in json.dumps(r.json())


def test_a_created_token_is_shown_once_stored_hashed_and_works(make_tenant):
    tenant, _, admin = make_tenant()
    r = _create(admin, name="deploy bot", scope="full")
    assert r.status_code == 201, r.content
    created = r.json()
    row = ApiToken.objects.get(pk=created["id"])
    assert row.tenant_id == tenant.pk and row.name == "deploy bot" and row.scope == "full"
    assert row.token_hash == token_hash(created["token"]) and created["token"] not in (
        row.prefix,
        row.token_hash,
    )
    assert (
        _client(created["token"]).post(JOBS, {"url": "http://a.example/"}, format="json").status_code == 202
    )
    listed = admin.get(TOKENS).json()["items"]
    assert {t["id"] for t in listed} == {row.pk, ApiToken.objects.exclude(pk=row.pk).get(tenant=tenant).pk}
    assert all("token" not in t for t in listed)


def test_a_second_token_works_while_the_first_is_revoked(make_tenant):
    tenant, first_raw, first = make_tenant()
    second_raw = _create(first, scope="admin").json()["token"]
    assert first.get(JOBS).status_code == 200  # the first is in this process's token cache now
    first_id = ApiToken.objects.get(token_hash=token_hash(first_raw)).pk
    second = _client(second_raw)
    assert second.delete(f"{TOKENS}/{first_id}").status_code == 204
    assert first.get(JOBS).status_code == 401
    assert second.get(JOBS).status_code == 200
    assert ApiToken.objects.get(pk=first_id).revoked_at is not None
    assert second.delete(f"{TOKENS}/{first_id}").status_code == 404  # already revoked
    assert [t["id"] for t in second.get(TOKENS).json()["items"]] != [first_id]


def test_another_tenants_token_cannot_be_revoked(make_tenant):
    other, _, _ = make_tenant()
    _, _, mine = make_tenant()
    theirs = ApiToken.objects.get(tenant=other)
    assert mine.delete(f"{TOKENS}/{theirs.pk}").status_code == 404
    assert mine.delete(f"{TOKENS}/nonsense").status_code == 404
    assert ApiToken.objects.get(pk=theirs.pk).revoked_at is None


def test_bad_input_is_refused_and_creates_nothing(make_tenant):
    tenant, _, admin = make_tenant()
    for body in (
        {"name": "x", "scope": "root"},
        {"scope": "full"},
        {"name": "x", "scope": "full", "colour": 1},
    ):
        r = admin.post(TOKENS, data=body, format="json")
        assert r.status_code == 400 and r.json()["type"] == "validation_error", r.content
    past = (timezone.now() - timedelta(minutes=1)).isoformat()
    r = _create(admin, expires_at=past)
    assert r.status_code == 400 and r.json()["code"] == "token_expiry_invalid"
    assert ApiToken.objects.filter(tenant=tenant).count() == 1


def test_a_token_that_expires_creates_only_tokens_that_expire_no_later(make_tenant):
    tenant, _, _ = make_tenant()
    own_expiry = timezone.now() + timedelta(days=1)
    limited = _client(token_create(tenant=tenant, scope="admin", expires_at=own_expiry))
    for body in ({}, {"expires_at": None}, {"expires_at": (own_expiry + timedelta(seconds=1)).isoformat()}):
        r = _create(limited, **body)
        assert r.status_code == 400 and r.json()["code"] == "token_expiry_invalid", r.content
    r = _create(limited, expires_at=own_expiry.isoformat())
    assert r.status_code == 201, r.content
    assert ApiToken.objects.get(pk=r.json()["id"]).expires_at == own_expiry


def test_an_expired_token_is_refused(make_tenant):
    tenant, _, _ = make_tenant()
    raw = token_create(tenant=tenant, scope="read", expires_at=timezone.now() + timedelta(days=1))
    client = _client(raw)
    assert client.get(JOBS).status_code == 200  # cached now
    ApiToken.objects.filter(token_hash=token_hash(raw)).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    with override_settings(SCRAPEJOBS_TOKEN_CACHE_S=0):
        assert client.get(JOBS).status_code == 401


def test_a_tenant_holds_at_most_the_configured_number_of_live_tokens(make_tenant):
    tenant, _, admin = make_tenant()
    with override_settings(SCRAPEJOBS_TENANT_MAX_TOKENS=3):
        assert _create(admin).status_code == 201
        made = _create(admin)
        assert made.status_code == 201
        r = _create(admin)
        assert r.status_code == 409 and r.json()["code"] == "token_limit_reached", r.content
        assert ApiToken.objects.filter(tenant=tenant).count() == 3
        # A revoked or expired token no longer counts.
        assert admin.delete(f"{TOKENS}/{made.json()['id']}").status_code == 204
        assert _create(admin).status_code == 201
        assert _create(admin).status_code == 409


def test_a_full_token_may_not_manage_tokens_or_webhook_secrets(make_tenant):
    _, _, admin = make_tenant()
    full = _client(_create(admin, scope="full").json()["token"])
    for method, path in (
        ("get", TOKENS),
        ("post", TOKENS),
        ("delete", f"{TOKENS}/1"),
        ("get", "/api/v1/webhook-secrets"),
        ("post", "/api/v1/webhook-secrets/rotate"),
    ):
        r = getattr(full, method)(path, data={"name": "x", "scope": "read"}, format="json")
        assert r.status_code == 403, (method, path, r.content)
        assert r.json()["type"] == "permission_error" and r.json()["code"] == "token_scope_insufficient"
    assert full.post(JOBS, {"url": "http://a.example/"}, format="json").status_code == 202


def _write_operations() -> list[tuple[str, str]]:
    schema = json.loads(SCHEMA.read_text())
    found = []
    for path, item in schema["paths"].items():
        for method in item:
            if method in ("post", "put", "patch", "delete"):
                found.append((method, re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)))
    return found


def test_a_read_token_is_refused_on_every_write_operation_of_the_schema(make_tenant):
    _, _, admin = make_tenant()
    read = _client(_create(admin, scope="read").json()["token"])
    operations = _write_operations()
    assert ("post", "/api/v1/jobs") in operations and len(operations) >= 6
    for method, path in operations:
        r = getattr(read, method)(path, data={"url": "http://a.example/"}, format="json")
        assert r.status_code == 403, (method, path, r.content)
        assert r.json()["code"] == "token_scope_insufficient"
    # The lean submit path (a plain JSON POST, no DRF request) refuses it too.
    r = read.post(JOBS, data='{"url": "http://a.example/"}', content_type="application/json")
    assert r.status_code == 403 and r.json()["code"] == "token_scope_insufficient"
    assert read.get(JOBS).status_code == 200


@override_settings(SCRAPEJOBS_RATE_LIMIT_PER_SECOND=1000)
def test_last_use_is_kept_in_redis_and_written_by_the_flush(make_tenant):
    """It rides in the rate limit's round trip (apps/tenants/throttling.py): with the limit on."""
    tenant, raw, client = make_tenant()
    row = ApiToken.objects.get(tenant=tenant)
    assert row.last_used_at is None
    assert client.get(JOBS).status_code == 200
    listed = client.get(TOKENS).json()["items"]
    assert listed[0]["last_used_at"] is not None  # from Redis, before any flush
    assert ApiToken.objects.get(pk=row.pk).last_used_at is None  # no request wrote the database
    assert tokens_last_used_flush() == 1
    assert ApiToken.objects.get(pk=row.pk).last_used_at is not None
    assert tokens_last_used_flush() == 0


def test_the_webhook_secret_rotates_through_the_api_and_its_values_are_never_listed(make_tenant):
    tenant, _, admin = make_tenant()
    old = tenant.webhook_secret
    r = admin.get("/api/v1/webhook-secrets")
    assert r.status_code == 200, r.content
    assert r.json()["current"]["created_at"] is not None and r.json()["previous"] is None
    r = admin.post("/api/v1/webhook-secrets/rotate")
    assert r.status_code == 201, r.content
    new = r.json()["secret"]
    tenant.refresh_from_db()
    assert new.startswith("whsec_") and tenant.webhook_secret == new and tenant.webhook_secret_previous == old
    listed = admin.get("/api/v1/webhook-secrets")
    body = listed.json()
    assert body["previous"]["expires_at"] == r.json()["previous_expires_at"]
    assert body["previous"]["created_at"] is not None
    assert new not in listed.content.decode() and old not in listed.content.decode()
