"""API tokens: hashed, cached briefly, revocable (FR-9, NFR-2 (intake latency), NFR-6)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings

from apps.jobs.models import Job
from apps.tenants.models import ApiToken
from apps.tenants.services import tenant_create, token_authenticate, token_hash, token_revoke

JOBS = "/api/v1/jobs"


def _post(client, body: str = '{"url": "http://a.example/"}'):
    return client.post(JOBS, data=body, content_type="application/json")


@pytest.mark.django_db
def test_only_the_hash_of_a_token_is_stored():
    created = tenant_create(name="hashy")
    row = ApiToken.objects.get(tenant=created.tenant)
    assert row.token_hash == token_hash(created.token)
    assert created.token not in (row.token_hash, row.prefix)


@pytest.mark.django_db(transaction=True)
def test_a_submit_with_a_warm_token_is_one_insert_and_nothing_else(make_tenant):
    """Autocommit intake: no BEGIN/COMMIT round trips, no token query once the token is cached."""
    _, _, client = make_tenant()
    assert _post(client).status_code == 202  # warms the token cache
    with CaptureQueriesContext(connection) as queries:
        assert _post(client).status_code == 202
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["INSERT"]
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_a_token_revoked_through_the_service_stops_working_at_once_despite_the_cache(make_tenant):
    tenant, raw, client = make_tenant()
    assert _post(client).status_code == 202  # cached now
    token = ApiToken.objects.get(tenant=tenant)
    assert token_revoke(token_id=token.pk) is True
    assert _post(client).status_code == 401
    assert token_revoke(token_id=token.pk) is False  # already revoked


@pytest.mark.django_db
def test_the_cache_is_what_lets_a_token_revoked_elsewhere_work_until_it_expires(make_tenant):
    """The documented trade-off: another process's revocation shows after SCRAPEJOBS_TOKEN_CACHE_S."""
    tenant, raw, _ = make_tenant()
    with override_settings(SCRAPEJOBS_TOKEN_CACHE_S=300):
        assert token_authenticate(raw=raw) is not None
        ApiToken.objects.filter(tenant=tenant).update(revoked_at="2026-01-01T00:00:00Z")  # "elsewhere"
        assert token_authenticate(raw=raw) is not None
    with override_settings(SCRAPEJOBS_TOKEN_CACHE_S=0):
        assert token_authenticate(raw=raw) is None


@pytest.mark.django_db
def test_an_operator_revokes_tokens_in_the_admin(make_tenant):
    tenant, raw, api = make_tenant()
    admin_user = get_user_model().objects.create_superuser("root", "root@example.test", "pw")
    browser = Client()
    browser.force_login(admin_user)
    token = ApiToken.objects.get(tenant=tenant)
    r = browser.post(
        "/admin/tenants/apitoken/",
        {"action": "revoke", "_selected_action": [str(token.pk)]},
        follow=True,
    )
    assert r.status_code == 200 and b"Revoked 1 token(s)." in r.content
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    assert _post(api).status_code == 401
