"""``python manage.py ensure_demo_tenant --token-file .run/dev/demo-token``: the tenant that
``make run`` hands to a newcomer.

Tokens are stored hashed, so a token cannot be printed again from the database. The demo token is
therefore kept in ``--token-file`` (mode 0600) when it is made, and read back on the next run. If
the file is missing or its token no longer works (database reset, token revoked), a new token is
made for the demo tenant: the printed token always works.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from apps.tenants.models import Tenant
from apps.tenants.services import tenant_create, token_authenticate, token_create


def _write_secret(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")


class Command(BaseCommand):
    help = "Create the demo tenant if absent and print a working token for it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default="demo")
        parser.add_argument("--token-file", type=Path, required=True, help="where the demo token is kept")

    def handle(self, *args: Any, name: str, token_file: Path, **options: Any) -> None:
        tenant = Tenant.objects.filter(name=name).first()
        if tenant is None:
            created = tenant_create(name=name)
            tenant, token = created.tenant, created.token
            _write_secret(token_file, token)
        else:
            token = token_file.read_text().strip() if token_file.exists() else ""
            found = token_authenticate(raw=token) if token else None
            if found is None or found[0].pk != tenant.pk:
                token = token_create(tenant=tenant, name="demo")
                _write_secret(token_file, token)
        self.stdout.write(f"tenant: {tenant.name}")
        self.stdout.write(f"token: {token}")
        self.stdout.write(f"webhook_secret: {tenant.webhook_secret}")
