"""``manage.py erase_tenant <tenant id or name> --yes``: erase a tenant and everything it owns
(FR-54, docs/erasure.md), printing what was removed."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.erasure.tenants import TenantErasureStorageFailed, TenantHasUnfinishedJobs, tenant_erase
from apps.tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Erase a tenant: its jobs' stored objects and rows, batches, crawls, deliveries, tokens, the tenant."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="The tenant's id or name.")
        parser.add_argument("--yes", action="store_true", help="Do it (without it, nothing is changed).")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = _tenant(options["tenant"])
        if not options["yes"]:
            jobs = tenant.jobs.count()
            raise CommandError(
                f"would erase tenant {tenant.name} ({tenant.id}) and its {jobs} jobs: add --yes"
            )
        try:
            stats = tenant_erase(tenant_id=tenant.id)
        except TenantHasUnfinishedJobs as e:
            raise CommandError(
                f"tenant {tenant.name} has {e.count} queued or running jobs: cancel them first "
                "(the admin's job list, or POST /jobs/{id}/cancel), then run this again"
            ) from None
        except TenantErasureStorageFailed as e:
            raise CommandError(f"{e}; run this again once the storage answers") from None
        self.stdout.write(f"erased tenant {tenant.name} ({tenant.id})")
        for name, count in asdict(stats).items():
            self.stdout.write(f"  {name.replace('_', ' ')}: {count}")


def _tenant(ref: str) -> Tenant:
    try:
        found = Tenant.objects.filter(id=uuid.UUID(ref)).first()
    except ValueError:
        found = None
    found = found or Tenant.objects.filter(name=ref).first()
    if found is None:
        raise CommandError(f"no tenant {ref!r}")
    return found
