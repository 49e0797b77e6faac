"""Reads of tenants that other parts need."""

from __future__ import annotations

from collections.abc import Iterable

from apps.tenants.models import Tenant


def tenant_weights_get(*, tenant_ids: Iterable[str]) -> dict[str, int]:
    """Each tenant's fair-dispatch weight, by id (as text); one query for all of them."""
    rows = Tenant.objects.filter(id__in=list(tenant_ids)).values_list("id", "weight")
    return {str(tenant_id): weight for tenant_id, weight in rows}
