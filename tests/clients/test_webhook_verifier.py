"""The client's webhook verifier takes both header schemes while the old one is deprecated, with
the secret in either form it was shown (FR-23, FR-24); real deliveries to a loopback receiver."""

from __future__ import annotations

import base64
import secrets
import time

import pytest
from scrapejobs_client.webhooks import WebhookVerificationError, verify
from standardwebhooks import Webhook

from apps.webhooks.models import DeliveryStatus, WebhookDelivery
from apps.webhooks.services import webhooks_enqueue_final
from apps.webhooks.signing import SIGNATURE_HEADER, secret_legacy_form
from tests.webhooks.test_deliveries import deliver_until, succeeded_job

pytestmark = pytest.mark.django_db


def test_a_delivery_verifies_under_either_scheme_and_either_form_of_the_secret(make_tenant, target, settings):
    settings.SCRAPEJOBS_WEBHOOK_TIMEOUT_S = 2.0
    tenant, _, _ = make_tenant()
    job = succeeded_job(tenant, callback_url=target.url("/status/200"))
    webhooks_enqueue_final()
    deliver_until(lambda: WebhookDelivery.objects.get(job=job).status == DeliveryStatus.DELIVERED)
    [(_at, _path, _m, headers, body)] = target.requests_for("/status/200")

    standard = {k: v for k, v in headers.items() if k.lower().startswith("webhook-")}
    legacy = {SIGNATURE_HEADER: headers[SIGNATURE_HEADER]}
    for secret in (tenant.webhook_secret, secret_legacy_form(tenant.webhook_secret)):
        assert verify(secret, body, standard)["id"] == str(job.id)
        assert verify(secret, body, legacy)["status"] == "succeeded"
        assert verify(secret, body, headers)["id"] == str(job.id)
    Webhook(tenant.webhook_secret).verify(body, standard)

    other = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    for scheme in (standard, legacy):
        with pytest.raises(WebhookVerificationError):
            verify(other, body, scheme)
        with pytest.raises(WebhookVerificationError):
            verify(tenant.webhook_secret, body.replace(b"succeeded", b"failed"), scheme)
        with pytest.raises(WebhookVerificationError):
            verify(tenant.webhook_secret, body, scheme, now=time.time() + 600)  # a replay
    with pytest.raises(WebhookVerificationError):
        verify(tenant.webhook_secret, body, {})


@pytest.mark.parametrize("scheme", ["standard", "legacy"])
def test_a_signature_header_with_non_ascii_text_is_an_invalid_signature_not_a_crash(scheme):
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    now = int(time.time())
    headers = (
        {"webhook-id": "msg_1", "webhook-timestamp": str(now), "webhook-signature": "v1,sïgnätürе"}
        if scheme == "standard"
        else {SIGNATURE_HEADER: f"t={now},v1=ünïcode"}
    )
    with pytest.raises(WebhookVerificationError, match="no signature matches"):
        verify(secret, b'{"id": "x"}', headers)
