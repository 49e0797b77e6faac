"""The client's and the CLI's token and webhook-secret calls against a real web process (FR-36,
FR-37, docs/client.md): rows out in PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from scrapejobs_client import AsyncClient, AuthenticationFailed, BadRequest, Client, InvalidRequest, NotFound

from apps.tenants.models import ApiToken, Tenant

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def web(shared_web, make_tenant):
    """(base URL, token, tenant): the module's web process, a tenant of this test's own."""
    tenant, token, _ = make_tenant()
    return f"http://127.0.0.1:{shared_web}", token, tenant


def test_the_client_creates_lists_and_revokes_tokens_and_rotates_the_webhook_secret(web):
    base, token, tenant = web
    with Client(base, token) as sj:
        expires = timezone.now() + timedelta(days=3)
        made = sj.create_token("reader", "read", expires_at=expires)
        assert made.token.startswith("sj_") and made.scope == "read"
        row = ApiToken.objects.get(pk=made.id)
        assert row.tenant_id == tenant.pk and row.expires_at == expires
        assert {t.id for t in sj.tokens()} == {
            made.id,
            ApiToken.objects.exclude(pk=made.id).get(tenant=tenant).pk,
        }
        with pytest.raises(InvalidRequest):
            sj.create_token("x", "root")
        with Client(base, made.token) as reader:
            assert list(reader.jobs()) == []
            with pytest.raises(AuthenticationFailed) as refused:
                reader.submit("http://a.example/")
            assert refused.value.status_code == 403 and refused.value.code == "token_scope_insufficient"
        sj.revoke_token(made.id)
        assert ApiToken.objects.get(pk=made.id).revoked_at is not None
        with pytest.raises(NotFound):
            sj.revoke_token(made.id)

        assert sj.webhook_secrets().previous is None
        rotated = sj.rotate_webhook_secret()
        assert Tenant.objects.get(pk=tenant.pk).webhook_secret == rotated.secret
        listed = sj.webhook_secrets()
        assert listed.previous is not None and listed.previous.expires_at == rotated.previous_expires_at
        assert rotated.secret not in json.dumps(listed.raw)


def test_the_async_client_has_the_same_token_calls(web):
    base, token, tenant = web

    async def run() -> None:
        async with AsyncClient(base, token) as sj:
            made = await sj.create_token("ci", "full")
            assert made.id in {t.id for t in await sj.tokens()}
            with pytest.raises(BadRequest):
                await sj.create_token("past", "full", expires_at=timezone.now() - timedelta(days=1))
            await sj.revoke_token(made)
            assert (await sj.rotate_webhook_secret()).secret.startswith("whsec_")
            assert (await sj.webhook_secrets()).previous is not None

    asyncio.run(run())
    assert ApiToken.objects.filter(tenant=tenant, revoked_at__isnull=False).count() == 1


def test_the_cli_creates_lists_and_revokes_tokens_and_rotates_the_secret(web):
    base, token, tenant = web
    env = {
        **os.environ,
        "SCRAPEJOBS_URL": base,
        "SCRAPEJOBS_TOKEN": token,
        "PYTHONPATH": str(ROOT / "clients" / "python" / "src"),
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "scrapejobs_client.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    made = cli("tokens", "create", "bot", "--scope", "full")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    row = ApiToken.objects.get(tenant=tenant, name="bot")
    assert row.scope == "full" and secret.startswith(row.prefix)
    listed = cli("--json", "tokens", "ls")
    assert listed.returncode == 0 and {json.loads(line)["id"] for line in listed.stdout.splitlines()} == set(
        ApiToken.objects.filter(tenant=tenant).values_list("id", flat=True)
    )
    assert cli("tokens", "revoke", str(row.pk)).returncode == 0
    assert ApiToken.objects.get(pk=row.pk).revoked_at is not None
    assert cli("tokens", "revoke", str(row.pk)).returncode == 5  # no such live token: the API's 404
    rotated = cli("webhook-secret", "rotate")
    assert (
        rotated.returncode == 0 and Tenant.objects.get(pk=tenant.pk).webhook_secret == rotated.stdout.strip()
    )
    shown = cli("webhook-secret", "show")
    assert shown.returncode == 0 and "signs until" in shown.stdout


def test_the_client_lists_and_redelivers_webhook_deliveries_and_re_enables_a_callback(web):
    from apps.webhooks.models import DeliveryStatus, DisabledCallback, WebhookDelivery
    from apps.webhooks.services import webhooks_enqueue_final
    from tests.webhooks.test_deliveries import succeeded_job

    base, token, tenant = web
    job = succeeded_job(tenant, callback_url="http://127.0.0.1:9/hook?key=s3cret")
    webhooks_enqueue_final()
    delivery = WebhookDelivery.objects.get(job=job)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.FAILED, next_attempt_at=None)
    disabled = DisabledCallback.objects.create(
        tenant=tenant, url="http://127.0.0.1:9/gone", url_sha256="0" * 64, disabled_at=timezone.now()
    )
    with Client(base, token) as sj:
        [listed] = list(sj.webhook_deliveries(status="failed", job=str(job.id)))
        assert listed.id == delivery.pk and listed.url.endswith("?key=***")
        sj.redeliver(listed)
        assert WebhookDelivery.objects.get(pk=delivery.pk).status == DeliveryStatus.PENDING
        with pytest.raises(NotFound):
            sj.redeliver(10**12)
        [callback] = sj.disabled_callbacks()
        assert callback.id == disabled.pk
        sj.enable_callback(callback)
        assert not DisabledCallback.objects.filter(pk=disabled.pk).exists()

    async def run() -> None:
        async with AsyncClient(base, token) as sj:
            assert [d.id async for d in sj.webhook_deliveries()] == [delivery.pk]
            assert await sj.disabled_callbacks() == []

    asyncio.run(run())


def test_the_cli_lists_and_redelivers_webhook_deliveries(web):
    from apps.webhooks.models import DeliveryStatus, WebhookDelivery
    from apps.webhooks.services import webhooks_enqueue_final
    from tests.webhooks.test_deliveries import succeeded_job

    base, token, tenant = web
    job = succeeded_job(tenant, callback_url="http://127.0.0.1:9/hook?key=s3cret")
    webhooks_enqueue_final()
    delivery = WebhookDelivery.objects.get(job=job)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.FAILED, next_attempt_at=None)
    env = {**os.environ, "SCRAPEJOBS_URL": base, "SCRAPEJOBS_TOKEN": token}
    env["PYTHONPATH"] = str(ROOT / "clients" / "python" / "src")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "scrapejobs_client.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    listed = cli("--json", "webhook-deliveries", "ls", "--status", "failed")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [delivery.pk]
    assert "s3cret" not in listed.stdout
    assert cli("webhook-deliveries", "redeliver", str(delivery.pk)).returncode == 0
    assert WebhookDelivery.objects.get(pk=delivery.pk).status == DeliveryStatus.PENDING
