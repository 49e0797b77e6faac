from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

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


# hash -> (valid until, tenant, token). Saves intake one database round trip per request; the
# price is that a token revoked (or a tenant deactivated) in another process keeps working for
# up to SCRAPEJOBS_TOKEN_CACHE_S seconds. Only successful look-ups are kept, so a new token works
# at once and a flood of bad tokens cannot grow the cache.
_token_cache: dict[str, tuple[float, Tenant, ApiToken]] = {}
_token_cache_lock = threading.Lock()
_TOKEN_CACHE_MAX = 10_000


def token_cached(*, raw: str) -> tuple[Tenant, ApiToken] | None:
    """The token's tenant and token when this process remembers them (``token_authenticate``
    did, less than SCRAPEJOBS_TOKEN_CACHE_S ago), else None: no database."""
    return _remembered(token_hash(raw))


def _remembered(digest: str) -> tuple[Tenant, ApiToken] | None:
    if settings.SCRAPEJOBS_TOKEN_CACHE_S <= 0:
        return None
    hit = _token_cache.get(digest)
    if hit is None or hit[0] <= time.monotonic():
        return None
    return hit[1], hit[2]


def token_authenticate(*, raw: str) -> tuple[Tenant, ApiToken] | None:
    digest = token_hash(raw)
    found = _remembered(digest)
    if found is not None:
        return found
    ttl = settings.SCRAPEJOBS_TOKEN_CACHE_S
    token = (
        ApiToken.objects.select_related("tenant")
        .filter(token_hash=digest, revoked_at__isnull=True, tenant__is_active=True)
        .first()
    )
    if token is None:
        return None
    if ttl > 0:
        with _token_cache_lock:
            if len(_token_cache) >= _TOKEN_CACHE_MAX:
                _token_cache.clear()
            _token_cache[digest] = (time.monotonic() + ttl, token.tenant, token)
    return token.tenant, token


def token_revoke(*, token_id: int) -> bool:
    """Revoke a token. This process forgets it at once; other processes within
    SCRAPEJOBS_TOKEN_CACHE_S seconds (their cache)."""
    token = ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True).first()
    if token is None:
        return False
    ApiToken.objects.filter(pk=token_id).update(revoked_at=timezone.now())
    with _token_cache_lock:
        _token_cache.pop(token.token_hash, None)
    return True
