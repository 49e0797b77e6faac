from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

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


def webhook_secret_new() -> str:
    """A webhook secret in the Standard Webhooks form: ``whsec_`` + standard base64 of 32 random
    bytes (FR-23)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def tenant_create(*, name: str, rate_limit_per_second: int | None = None) -> NewTenant:
    secret = webhook_secret_new()
    with transaction.atomic():
        tenant = Tenant.objects.create(
            name=name, webhook_secret=secret, rate_limit_per_second=rate_limit_per_second
        )
        token = token_create(tenant=tenant)
    return NewTenant(tenant=tenant, token=token, webhook_secret=secret)


@dataclass(frozen=True)
class RotatedSecret:
    secret: str
    previous_signs_until: datetime


def webhook_secret_rotate(*, tenant_id: uuid.UUID | str, grace_s: float | None = None) -> RotatedSecret:
    """Give the tenant a new webhook secret and return it (the one chance to see it). The secret
    it replaces keeps signing beside it for ``grace_s`` (SCRAPEJOBS_WEBHOOK_SECRET_GRACE_S), then
    is dropped (FR-23). Rotating again within the grace period drops the older one at once: two
    secrets sign at most."""
    grace = settings.SCRAPEJOBS_WEBHOOK_SECRET_GRACE_S if grace_s is None else grace_s
    new = webhook_secret_new()
    until = timezone.now() + timedelta(seconds=grace)
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().only("id", "webhook_secret").get(pk=tenant_id)
        Tenant.objects.filter(pk=tenant.pk).update(
            webhook_secret=new,
            webhook_secret_previous=tenant.webhook_secret,
            webhook_secret_previous_until=until,
        )
    return RotatedSecret(secret=new, previous_signs_until=until)


def webhook_secrets_drop_expired(*, now: datetime | None = None) -> int:
    """Forget previous secrets whose grace period is over; returns how many were dropped.
    Signing already ignores them (``apps.jobs.selectors.jobs_webhook_secrets``); this removes the text."""
    return Tenant.objects.filter(webhook_secret_previous_until__lte=now or timezone.now()).update(
        webhook_secret_previous="", webhook_secret_previous_until=None
    )


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
