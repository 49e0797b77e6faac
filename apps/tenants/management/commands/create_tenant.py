"""``python manage.py create_tenant NAME``: a tenant and its first API token, for operators and
scripts. The token is stored hashed, so these lines are the only place it is ever shown."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.tenants.models import Tenant
from apps.tenants.services import tenant_create


class Command(BaseCommand):
    help = "Create a tenant; prints its API token and webhook secret (shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument(
            "--rate-limit",
            type=int,
            default=None,
            help="requests per second per token (default: SCRAPEJOBS_RATE_LIMIT_PER_SECOND)",
        )

    def handle(self, *args: Any, name: str, rate_limit: int | None, **options: Any) -> None:
        if Tenant.objects.filter(name=name).exists():
            raise CommandError(f"a tenant named {name!r} already exists")
        created = tenant_create(name=name, rate_limit_per_second=rate_limit)
        # One `key: value` per line, so scripts can `grep '^token:' | cut -d' ' -f2`.
        self.stdout.write(f"tenant: {created.tenant.id}")
        self.stdout.write(f"token: {created.token}")
        self.stdout.write(f"webhook_secret: {created.webhook_secret}")
