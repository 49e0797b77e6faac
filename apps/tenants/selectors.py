"""Reads of tenants that other parts need."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import redis

from apps.redis_clients import fail_open_redis
from apps.tenants.models import ApiToken, Tenant
from apps.tenants.throttling import TOKENS_LAST_USED_KEY


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


def tokens_list(*, tenant_id: uuid.UUID | str) -> list[ApiToken]:
    """The tenant's tokens that are not revoked, newest first (expired ones too: they say so),
    each ``last_used_at`` the later of the database's and what Redis holds that beat has not
    written yet (FR-36). Without Redis, the database's alone."""
    tokens = list(
        ApiToken.objects.filter(tenant_id=tenant_id, revoked_at__isnull=True).order_by("-created_at", "-id")
    )
    if not tokens:
        return tokens
    try:
        pending = fail_open_redis().hmget(TOKENS_LAST_USED_KEY, [t.pk for t in tokens])
    except redis.RedisError:
        pending = [None] * len(tokens)
    for token, at in zip(tokens, pending, strict=True):
        if at is not None:
            seen = datetime.fromtimestamp(int(at), tz=UTC)
            if token.last_used_at is None or seen > token.last_used_at:
                token.last_used_at = seen
    return tokens


def tenant_webhook_secrets_describe(*, tenant_id: uuid.UUID | str, now: datetime) -> dict[str, Any]:
    """The tenant's webhook secrets without their values (FR-37): the current one's creation, and
    the previous one's creation and end of grace while it still signs."""
    tenant = Tenant.objects.only(
        "webhook_secret_created_at",
        "webhook_secret_previous",
        "webhook_secret_previous_created_at",
        "webhook_secret_previous_until",
    ).get(pk=tenant_id)
    previous = None
    until = tenant.webhook_secret_previous_until
    if tenant.webhook_secret_previous and until is not None and until > now:
        previous = {"created_at": tenant.webhook_secret_previous_created_at, "expires_at": until}
    return {
        "current": {"created_at": tenant.webhook_secret_created_at, "expires_at": None},
        "previous": previous,
    }
