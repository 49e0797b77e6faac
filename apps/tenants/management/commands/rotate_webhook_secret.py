"""``python manage.py rotate_webhook_secret TENANT``: a new webhook secret for a tenant (by name
or id), printed once; the old one keeps signing beside it for SCRAPEJOBS_WEBHOOK_SECRET_GRACE_S
(or ``--grace-s``), then is dropped (FR-23, docs/webhooks.md)."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.tenants.models import Tenant
from apps.tenants.services import webhook_secret_rotate


class Command(BaseCommand):
    help = "Rotate a tenant's webhook secret; prints the new one (shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="the tenant's name or id")
        parser.add_argument(
            "--grace-s",
            type=float,
            default=None,
            help="seconds the old secret keeps signing (default: SCRAPEJOBS_WEBHOOK_SECRET_GRACE_S)",
        )

    def handle(self, *args: Any, tenant: str, grace_s: float | None, **options: Any) -> None:
        if grace_s is not None and grace_s < 0:
            raise CommandError("--grace-s must be 0 or more")
        try:
            found = Tenant.objects.filter(pk=uuid.UUID(tenant)).first()
        except ValueError:
            found = Tenant.objects.filter(name=tenant).first()
        if found is None:
            raise CommandError(f"no tenant {tenant!r}")
        rotated = webhook_secret_rotate(tenant_id=found.pk, grace_s=grace_s)
        # One `key: value` per line, like create_tenant.
        self.stdout.write(f"tenant: {found.pk}")
        self.stdout.write(f"webhook_secret: {rotated.secret}")
        self.stdout.write(f"previous_signs_until: {rotated.previous_signs_until.isoformat()}")
