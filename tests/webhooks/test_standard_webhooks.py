"""Standard Webhooks 1.0 on every delivery (FR-23, docs/webhooks.md), checked with the reference
verifier (the `standardwebhooks` package) against deliveries to a real loopback receiver."""

from __future__ import annotations

import base64
import importlib
import io
import json
import secrets
import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from standardwebhooks import Webhook, WebhookVerificationError

from apps.tenants.models import Tenant
from apps.tenants.services import webhook_secret_rotate, webhook_secrets_drop_expired
from apps.webhooks.models import DeliveryStatus, DisabledCallback, WebhookAttempt, WebhookDelivery
from apps.webhooks.services import webhooks_enqueue_final
from apps.webhooks.signing import SIGNATURE_HEADER, signature_verify
from tests.webhooks.test_deliveries import deliver_until, succeeded_job

pytestmark = pytest.mark.django_db


def _delivered(job) -> bool:
    return WebhookDelivery.objects.get(job=job).status == DeliveryStatus.DELIVERED


def test_a_real_delivery_verifies_with_the_standard_webhooks_library_and_keeps_its_id_on_retries(
    make_tenant, target, fast_retries
):
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/flaky/sw?fail=1&code=500"))
    webhooks_enqueue_final()

    deliver_until(lambda: _delivered(job))

    delivery = WebhookDelivery.objects.get(job=job)
    received = target.requests_for("/flaky/sw")
    assert len(received) == 2
    for _at, _path, _method, headers, body in received:
        assert body == delivery.body.encode()  # the body is as it always was
        assert headers["webhook-id"] == str(delivery.id)  # the same on the retry
        assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
        assert headers["webhook-signature"].startswith("v1,")
        assert Webhook(tenant.webhook_secret).verify(body, headers) == json.loads(body)
        with pytest.raises(WebhookVerificationError):
            Webhook("whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()).verify(body, headers)
        # The deprecated header still verifies, keyed on the secret's old text (URL-safe form).
        assert signature_verify(secret=tenant.webhook_secret, header=headers[SIGNATURE_HEADER], body=body)


def test_todays_secrets_are_re_encoded_and_the_deprecated_signature_is_keyed_as_before():
    migration = importlib.import_module("apps.tenants.migrations.0005_clients_webhook_secrets")
    raw = secrets.token_bytes(32)
    old = "whsec_" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()  # what tenants have today
    new = migration._standard_form(old)
    assert new == "whsec_" + base64.b64encode(raw).decode()
    body = b'{"id":"x"}'
    import hashlib
    import hmac

    from apps.webhooks.signing import signature_header, standard_headers

    header = signature_header(secret=new, body=body, timestamp=1700000000)
    expected = hmac.new(old.encode(), b"1700000000." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"  # an existing receiver keeps verifying
    headers = standard_headers(secrets=[new], msg_id="7", body=body, timestamp=int(time.time()))
    Webhook(new).verify(body, headers)
    assert migration._standard_form("whsec_not base64!") == "whsec_not base64!"


def test_after_a_rotation_both_secrets_sign_until_the_grace_period_ends(make_tenant, target, fast_retries):
    tenant, _, _ = make_tenant()
    old = tenant.webhook_secret
    out = io.StringIO()
    call_command("rotate_webhook_secret", tenant.name, stdout=out)
    printed = dict(line.split(": ", 1) for line in out.getvalue().splitlines())
    tenant.refresh_from_db()
    new = printed["webhook_secret"]
    assert new == tenant.webhook_secret != old and tenant.webhook_secret_previous == old
    job = succeeded_job(tenant, callback_url=target.url("/status/200"))
    webhooks_enqueue_final()

    deliver_until(lambda: _delivered(job))

    [(_at, _path, _m, headers, body)] = target.requests_for("/status/200")
    assert len(headers["webhook-signature"].split()) == 2
    Webhook(new).verify(body, headers)
    Webhook(old).verify(body, headers)
    assert signature_verify(secret=old, header=headers[SIGNATURE_HEADER], body=body)
    assert signature_verify(secret=new, header=headers[SIGNATURE_HEADER], body=body)

    # The grace period over: the old secret no longer signs, and is then dropped.
    Tenant.objects.filter(pk=tenant.pk).update(
        webhook_secret_previous_until=timezone.now() - timedelta(seconds=1)
    )
    later = succeeded_job(tenant, callback_url=target.url("/status/201"))
    webhooks_enqueue_final()
    deliver_until(lambda: WebhookDelivery.objects.get(job=later).last_status_code == 201)
    [(_at, _path, _m, headers, body)] = target.requests_for("/status/201")
    Webhook(new).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(body, headers)
    assert webhook_secrets_drop_expired() == 1
    tenant.refresh_from_db()
    assert (tenant.webhook_secret_previous, tenant.webhook_secret_previous_until) == ("", None)


def test_a_rotation_within_the_grace_period_keeps_two_signing_secrets_at_most(make_tenant):
    tenant, _, _ = make_tenant()
    webhook_secret_rotate(tenant_id=tenant.pk)
    second = webhook_secret_rotate(tenant_id=tenant.pk, grace_s=60)
    tenant.refresh_from_db()
    assert tenant.webhook_secret == second.secret and tenant.webhook_secret_previous != second.secret
    # time is the subject: a grace period's length: the previous secret
    # signs for the 60 s asked, less the test's run
    assert timedelta(seconds=55) < second.previous_signs_until - timezone.now() <= timedelta(seconds=60)


def test_the_admin_rotation_shows_the_new_secret_once(make_tenant):
    tenant, _, _ = make_tenant()
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("ops", "ops@example.test", "pw"))
    response = client.post(
        reverse("admin:tenants_tenant_changelist"),
        {"action": "rotate_webhook_secret", "_selected_action": [str(tenant.pk)]},
        follow=True,
    )
    tenant.refresh_from_db()
    shown = " ".join(str(m) for m in response.context["messages"])
    assert tenant.webhook_secret in shown and tenant.webhook_secret_previous
    page = client.get(reverse("admin:tenants_tenant_change", args=[tenant.pk])).content.decode()
    assert tenant.webhook_secret not in page and tenant.webhook_secret_previous not in page


def test_a_410_disables_the_url_for_that_tenant_until_an_operator_re_enables_it(
    make_tenant, target, fast_retries
):
    tenant, _, _ = make_tenant()
    other, _, _ = make_tenant()
    gone = target.url("/status/410")
    first = succeeded_job(tenant, callback_url=gone)
    webhooks_enqueue_final()
    deliver_until(lambda: WebhookDelivery.objects.get(job=first).status == DeliveryStatus.FAILED)
    assert WebhookDelivery.objects.get(job=first).attempts == 1  # not retried
    assert DisabledCallback.objects.filter(tenant=tenant, url=gone).exists()

    # Later jobs naming it are accepted; their deliveries are recorded as skipped, not sent.
    later = succeeded_job(tenant, callback_url=gone)
    others = succeeded_job(other, callback_url=gone)  # another tenant's: not disabled
    webhooks_enqueue_final()
    deliver_until(lambda: WebhookDelivery.objects.get(job=others).status == DeliveryStatus.FAILED)
    skipped = WebhookDelivery.objects.get(job=later)
    assert skipped.status == DeliveryStatus.SKIPPED and "410" in skipped.last_error
    assert not WebhookAttempt.objects.filter(delivery=skipped).exists()
    assert len(target.requests_for("/status/410")) == 2  # first, and the other tenant's

    client = Client()
    client.force_login(get_user_model().objects.create_superuser("ops", "ops@example.test", "pw"))
    page = client.get(reverse("admin:webhooks_webhookdelivery_changelist"), follow=True)
    assert "disabled" in " ".join(str(m) for m in page.context["messages"])
    client.post(
        reverse("admin:webhooks_disabledcallback_changelist"),
        {
            "action": "reenable",
            "_selected_action": [str(DisabledCallback.objects.get(tenant=tenant).pk)],
        },
    )
    assert not DisabledCallback.objects.filter(tenant=tenant).exists()
    again = succeeded_job(tenant, callback_url=gone)
    webhooks_enqueue_final()
    assert WebhookDelivery.objects.get(job=again).status == DeliveryStatus.PENDING


def test_a_410_skips_the_tenants_other_pending_deliveries_to_that_url(make_tenant, target, fast_retries):
    tenant, _, _ = make_tenant()
    gone = target.url("/status/410")
    jobs = [succeeded_job(tenant, callback_url=gone) for _ in range(3)]
    webhooks_enqueue_final()
    WebhookDelivery.objects.filter(job__in=jobs[1:]).update(
        next_attempt_at=timezone.now() + timedelta(hours=1)
    )

    deliver_until(lambda: WebhookDelivery.objects.get(job=jobs[0]).status == DeliveryStatus.FAILED)

    statuses = [WebhookDelivery.objects.get(job=j).status for j in jobs[1:]]
    assert statuses == [DeliveryStatus.SKIPPED, DeliveryStatus.SKIPPED]


def test_a_429_with_retry_after_is_retried_no_sooner_than_it_says(make_tenant, target, fast_retries):
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/retry-after/hook?fail=1&after=2"))
    webhooks_enqueue_final()

    deliver_until(lambda: _delivered(job), timeout=15)

    first, second = (r[0] for r in target.requests_for("/retry-after/hook"))
    assert second - first >= 2.0  # the schedule alone said 0.05 s
    assert list(WebhookAttempt.objects.filter(delivery__job=job).values_list("status_code", flat=True)) == [
        429,
        200,
    ]


def test_a_redirect_is_a_failed_attempt(make_tenant, target, fast_retries):
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/redirect/1"))
    webhooks_enqueue_final()
    deliver_until(lambda: WebhookDelivery.objects.get(job=job).status == DeliveryStatus.FAILED)
    assert set(WebhookAttempt.objects.filter(delivery__job=job).values_list("status_code", flat=True)) == {
        302
    }
