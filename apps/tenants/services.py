from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.redis_clients import state_redis
from apps.tenants.models import ApiToken, Tenant, TokenScope
from apps.tenants.throttling import TOKENS_LAST_USED_KEY

TOKEN_PREFIX = "sj_"
# NOTIFY channel of a revocation (payload: the token's hash). Every web process LISTENs on it with
# the connection its ``?wait=`` listener already holds (apps/query/waiting.py) and forgets the
# token at once (FR-36, docs/tokens.md).
TOKEN_REVOKED_CHANNEL = "scrapejobs_token_revoked"


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True)
class NewTenant:
    tenant: Tenant
    token: str
    webhook_secret: str


def token_create(
    *,
    tenant: Tenant,
    name: str = "default",
    scope: str = TokenScope.ADMIN,
    expires_at: datetime | None = None,
) -> str:
    """Create an API token and return it. Only its hash is stored: this is the one chance to see it."""
    return _token_insert(tenant=tenant, name=name, scope=scope, expires_at=expires_at)[1]


def _token_insert(
    *, tenant: Tenant, name: str, scope: str, expires_at: datetime | None
) -> tuple[ApiToken, str]:
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        tenant=tenant,
        name=name,
        prefix=raw[:10],
        token_hash=token_hash(raw),
        scope=scope,
        expires_at=expires_at,
    )
    return token, raw


class TokenRefused(Exception):
    """A token the caller may not create: ``code`` names the rule (apps/api/errors.py)."""

    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code, self.detail = code, detail


def token_issue(*, by: ApiToken, name: str, scope: str, expires_at: datetime | None) -> tuple[ApiToken, str]:
    """A new token of ``by``'s tenant, created through the API by the admin token ``by`` (FR-36):
    it never outlives ``by`` (a token with an expiry makes only tokens that expire no later), and
    the tenant keeps at most SCRAPEJOBS_TENANT_MAX_TOKENS live tokens. The tenant's row is locked
    while counting, so two concurrent creations cannot both take the last place."""
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise TokenRefused("token_expiry_invalid", "expires_at must be in the future.")
    if by.expires_at is not None and (expires_at is None or expires_at > by.expires_at):
        raise TokenRefused(
            "token_expiry_invalid",
            f"This token expires at {by.expires_at.isoformat()}: the tokens it creates must expire "
            "no later (give expires_at).",
        )
    cap = settings.SCRAPEJOBS_TENANT_MAX_TOKENS
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=by.tenant_id)
        if tokens_live(tenant_id=tenant.pk, now=now).count() >= cap:
            raise TokenRefused(
                "token_limit_reached",
                f"This tenant has {cap} live tokens, the most it may have "
                "(SCRAPEJOBS_TENANT_MAX_TOKENS): revoke one first.",
            )
        return _token_insert(tenant=tenant, name=name, scope=scope, expires_at=expires_at)


def tokens_live(*, tenant_id: uuid.UUID | str, now: datetime) -> Any:
    """The tenant's tokens that authenticate: neither revoked nor expired."""
    return ApiToken.objects.filter(tenant_id=tenant_id, revoked_at__isnull=True).exclude(expires_at__lte=now)


def webhook_secret_new() -> str:
    """A webhook secret in the Standard Webhooks form: ``whsec_`` + standard base64 of 32 random
    bytes (FR-23)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def tenant_create(*, name: str, rate_limit_per_second: int | None = None) -> NewTenant:
    secret = webhook_secret_new()
    with transaction.atomic():
        tenant = Tenant.objects.create(
            name=name,
            webhook_secret=secret,
            webhook_secret_created_at=timezone.now(),
            rate_limit_per_second=rate_limit_per_second,
        )
        token = token_create(tenant=tenant)
    return NewTenant(tenant=tenant, token=token, webhook_secret=secret)


@dataclass(frozen=True)
class RotatedSecret:
    secret: str
    created_at: datetime
    previous_signs_until: datetime


def webhook_secret_rotate(*, tenant_id: uuid.UUID | str, grace_s: float | None = None) -> RotatedSecret:
    """Give the tenant a new webhook secret and return it (the one chance to see it). The secret
    it replaces keeps signing beside it for ``grace_s`` (SCRAPEJOBS_WEBHOOK_SECRET_GRACE_S), then
    is dropped (FR-23). Rotating again within the grace period drops the older one at once: two
    secrets sign at most."""
    grace = settings.SCRAPEJOBS_WEBHOOK_SECRET_GRACE_S if grace_s is None else grace_s
    new = webhook_secret_new()
    now = timezone.now()
    until = now + timedelta(seconds=grace)
    with transaction.atomic():
        tenant = (
            Tenant.objects.select_for_update()
            .only("id", "webhook_secret", "webhook_secret_created_at")
            .get(pk=tenant_id)
        )
        Tenant.objects.filter(pk=tenant.pk).update(
            webhook_secret=new,
            webhook_secret_created_at=now,
            webhook_secret_previous=tenant.webhook_secret,
            webhook_secret_previous_created_at=tenant.webhook_secret_created_at,
            webhook_secret_previous_until=until,
        )
    return RotatedSecret(secret=new, created_at=now, previous_signs_until=until)


def webhook_secrets_drop_expired(*, now: datetime | None = None) -> int:
    """Forget previous secrets whose grace period is over; returns how many were dropped.
    Signing already ignores them (``apps.jobs.selectors.jobs_webhook_secrets``); this removes the text."""
    return Tenant.objects.filter(webhook_secret_previous_until__lte=now or timezone.now()).update(
        webhook_secret_previous="",
        webhook_secret_previous_until=None,
        webhook_secret_previous_created_at=None,
    )


# hash -> (valid until, tenant, token). Saves intake one database round trip per request. A
# revocation reaches every web process at once through TOKEN_REVOKED_CHANNEL (the web process's
# listener calls ``token_cache_forget``); a process that is not listening (a worker, a management
# command, a web process whose listener is reconnecting: it empties the cache when it is back)
# keeps a revoked token, or a deactivated tenant's, for up to SCRAPEJOBS_TOKEN_CACHE_S seconds.
# An entry never outlives its token's expiry. Only successful look-ups are kept, so a new token
# works at once and a flood of bad tokens cannot grow the cache.
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
    now = timezone.now()
    token = (
        ApiToken.objects.select_related("tenant")
        .filter(token_hash=digest, revoked_at__isnull=True, tenant__is_active=True)
        .exclude(expires_at__lte=now)
        .first()
    )
    if token is None:
        return None
    if ttl > 0:
        lasts = float(ttl)
        if token.expires_at is not None:
            lasts = min(lasts, (token.expires_at - now).total_seconds())
        with _token_cache_lock:
            if len(_token_cache) >= _TOKEN_CACHE_MAX:
                _token_cache.clear()
            _token_cache[digest] = (time.monotonic() + lasts, token.tenant, token)
    return token.tenant, token


def token_cache_forget(digests: list[str]) -> None:
    """Forget these tokens (by hash) in this process: the next request looks them up again."""
    with _token_cache_lock:
        for digest in digests:
            _token_cache.pop(digest, None)


def token_cache_clear() -> None:
    """Forget every token in this process (a listener that was not listening may have missed
    revocations)."""
    with _token_cache_lock:
        _token_cache.clear()


# Set by this process's revocation listener (apps/query/waiting.py) while its LISTEN is in force.
_revocations_listening = False
# digest -> event set when this process's listener hears that token's revocation.
_revocations_awaited: dict[str, threading.Event] = {}


def token_revocations_listening(listening: bool) -> None:
    """The listener says whether its LISTEN on TOKEN_REVOKED_CHANNEL is in force."""
    global _revocations_listening
    _revocations_listening = listening


def token_revocation_heard(digest: str) -> None:
    """The listener heard a revocation: forget the token, and wake a ``token_revoke`` of this
    process that waits for its own notice."""
    token_cache_forget([digest])
    heard = _revocations_awaited.get(digest)
    if heard is not None:
        heard.set()


def token_revoke(
    *, token_id: int, tenant_id: uuid.UUID | str | None = None, wait_heard_s: float = 0.0
) -> bool:
    """Revoke a token (of ``tenant_id`` when given); False when there is no such live token.
    This process forgets it at once, every web process as soon as PostgreSQL delivers the NOTIFY
    sent with the revocation's commit (their listeners, apps/query/waiting.py).

    ``wait_heard_s``: in a web process whose listener is listening, return only once that
    listener heard the notice too (at most this long). PostgreSQL signals every listening session
    at the commit, so by then the other web processes' notices are on their way or handled: the
    API's revocation answers after this, which narrows the window in which another process still
    serves the token to almost nothing (docs/tokens.md)."""
    tokens = ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True)
    if tenant_id is not None:
        tokens = tokens.filter(tenant_id=tenant_id)
    heard = None
    with transaction.atomic():
        digest = tokens.select_for_update().values_list("token_hash", flat=True).first()
        if digest is None:
            return False
        if wait_heard_s > 0 and _revocations_listening:
            heard = _revocations_awaited[digest] = threading.Event()
        ApiToken.objects.filter(pk=token_id).update(revoked_at=timezone.now())
        with connection.cursor() as cur:
            cur.execute("SELECT pg_notify(%s, %s)", [TOKEN_REVOKED_CHANNEL, digest])
    token_cache_forget([digest])
    if heard is not None:
        try:
            heard.wait(wait_heard_s)
        finally:
            _revocations_awaited.pop(digest, None)
    return True


def tokens_last_used_flush() -> int:
    """Write the tokens' last use, recorded in Redis by each request's rate-limit round trip
    (apps/tenants/throttling.py), to ``ApiToken.last_used_at`` in one statement; returns how many
    tokens it wrote. Beat runs it every SCRAPEJOBS_TOKEN_LAST_USED_FLUSH_S (FR-36): requests
    never write the database for it, so the per-job budget is unchanged. Taking the hash and
    deleting it is one MULTI: a request's use lands either in this flush or in the next."""
    client = state_redis()
    with client.pipeline(transaction=True) as pipe:
        pipe.hgetall(TOKENS_LAST_USED_KEY)
        pipe.delete(TOKENS_LAST_USED_KEY)
        used, _ = pipe.execute()
    if not used:
        return 0
    ids = [int(k) for k in used]
    times = [datetime.fromtimestamp(int(v), tz=UTC) for v in used.values()]
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE tenants_apitoken AS t
               SET last_used_at = GREATEST(t.last_used_at, u.at)
              FROM unnest(%s::bigint[], %s::timestamptz[]) AS u(id, at)
             WHERE t.id = u.id
            """,
            [ids, times],
        )
        return cur.rowcount
