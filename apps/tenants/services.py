from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from django.db import transaction

from apps.tenants.models import ApiToken, Tenant

TOKEN_PREFIX = "sj_"


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True)
class NewTenant:
    tenant: Tenant
    token: str
    webhook_secret: str


def token_create(*, tenant: Tenant, name: str = "default") -> str:
    """Create an API token and return it. Only its hash is stored: this is the one chance to see it."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    ApiToken.objects.create(tenant=tenant, name=name, prefix=raw[:10], token_hash=token_hash(raw))
    return raw


def tenant_create(*, name: str, rate_limit_per_second: int | None = None) -> NewTenant:
    secret = "whsec_" + secrets.token_urlsafe(32)
    with transaction.atomic():
        tenant = Tenant.objects.create(
            name=name, webhook_secret=secret, rate_limit_per_second=rate_limit_per_second
        )
        token = token_create(tenant=tenant)
    return NewTenant(tenant=tenant, token=token, webhook_secret=secret)


def token_authenticate(*, raw: str) -> tuple[Tenant, ApiToken] | None:
    token = (
        ApiToken.objects.select_related("tenant")
        .filter(token_hash=token_hash(raw), revoked_at__isnull=True, tenant__is_active=True)
        .first()
    )
    if token is None:
        return None
    return token.tenant, token
