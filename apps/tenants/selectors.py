"""Reads of tenants that other parts need."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from apps.tenants.models import Tenant


def tenant_weights_get(*, tenant_ids: Iterable[str]) -> dict[str, int]:
    """Each tenant's fair-dispatch weight, by id (as text); one query for all of them."""
    rows = Tenant.objects.filter(id__in=list(tenant_ids)).values_list("id", "weight")
    return {str(tenant_id): weight for tenant_id, weight in rows}


def tenants_webhook_secrets(*, tenant_ids: Iterable[uuid.UUID | str], now: datetime) -> dict[str, list[str]]:
    """By tenant id (as text): the webhook secrets that sign at ``now``, the current one first,
    then the one a rotation replaced while its grace period lasts (FR-23)."""
    rows = Tenant.objects.filter(id__in=[str(i) for i in tenant_ids]).values_list(
        "id", "webhook_secret", "webhook_secret_previous", "webhook_secret_previous_until"
    )
    found = {}
    for tenant_id, current, previous, previous_until in rows:
        keys = [current]
        if previous and previous_until is not None and previous_until > now:
            keys.append(previous)
        found[str(tenant_id)] = keys
    return found
