"""Webhook secrets in the Standard Webhooks form (FR-23): the same random bytes, re-encoded from
URL-safe base64 without padding to standard base64, so no tenant has to rotate; the deprecated
``Scrapejobs-Signature`` is still keyed on the old text, which apps.webhooks.signing derives from
the new one. Plus the previous secret of a rotation and until when it signs."""

from __future__ import annotations

import base64
import binascii

from django.db import migrations, models


def _standard_form(secret: str) -> str:
    if not secret.startswith("whsec_"):
        return secret
    encoded = secret[len("whsec_") :]
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError):
        return secret  # not base64: kept as it is, its text stays the key
    return "whsec_" + base64.b64encode(raw).decode()


def reencode(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    Tenant = apps.get_model("tenants", "Tenant")
    for tenant in Tenant.objects.only("id", "webhook_secret").iterator(chunk_size=500):
        new = _standard_form(tenant.webhook_secret)
        if new != tenant.webhook_secret:
            Tenant.objects.filter(pk=tenant.pk).update(webhook_secret=new)


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0004_sf_share_fetches"),
    ]

    operations = [
        migrations.AddField(
            model_name="tenant",
            name="webhook_secret_previous",
            field=models.CharField(blank=True, default="", max_length=128),
        ),
        migrations.AddField(
            model_name="tenant",
            name="webhook_secret_previous_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(reencode, migrations.RunPython.noop),
    ]
