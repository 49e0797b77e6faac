from __future__ import annotations

import uuid

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q


class Tenant(models.Model):
    """Who owns jobs. Every API token belongs to exactly one tenant."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200, unique=True)
    # Signs webhook deliveries (HMAC-SHA256); shown to the operator once, like a token. The
    # Standard Webhooks form, ``whsec_`` + standard base64 of 32 random bytes (FR-23).
    webhook_secret = models.CharField(max_length=128)
    # The secret a rotation replaced: it keeps signing beside the new one until
    # ``webhook_secret_previous_until`` (SCRAPEJOBS_WEBHOOK_SECRET_GRACE_S after the rotation),
    # so receivers can switch without missing a delivery; then it is dropped (FR-23).
    webhook_secret_previous = models.CharField(max_length=128, blank=True, default="")
    webhook_secret_previous_until = models.DateTimeField(null=True, blank=True)
    # When each was made, for GET /webhook-secrets (FR-37). Tenants older than these columns
    # count their secret from the tenant's creation (migration 0007); null for a previous
    # secret that was replaced before then.
    webhook_secret_created_at = models.DateTimeField(null=True, blank=True)
    webhook_secret_previous_created_at = models.DateTimeField(null=True, blank=True)
    # Requests per second per token for this tenant; null: the service default.
    rate_limit_per_second = models.PositiveIntegerField(null=True, blank=True)
    is_active = models.BooleanField(default=True)
    # robots.txt: an operator may let a tenant's jobs ignore it (a site's owner
    # crawling their own site); a domain policy and SCRAPEJOBS_ROBOTS_OBEY can switch it off too.
    obey_robots = models.BooleanField(
        default=True, help_text="Jobs of this tenant read and obey the target's robots.txt."
    )
    # Fair dispatch: within a priority, a tenant with backlog takes this many
    # turns to a weight-1 tenant's one (apps/publishing/publisher.py).
    weight = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1)],
        help_text="Share of the workers against other tenants with backlog in the same priority: "
        "a tenant of weight 3 gets three jobs started for each one of a weight-1 tenant.",
    )
    # Single-flight fetch across tenants: an identical request of another tenant that also allows
    # it may be served this tenant's fetch, and the other way round. Off by default: only an
    # operator switches it on (the admin).
    share_fetches = models.BooleanField(
        default=False,
        help_text="Share identical fetches with other tenants that also share theirs.",
    )
    # Backlog caps (FR-20, apps/tenants/backlog.py): null is the service's default
    # (SCRAPEJOBS_TENANT_MAX_QUEUED_JOBS, SCRAPEJOBS_TENANT_MAX_BATCHES_IN_PROGRESS).
    max_queued_jobs = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Queued jobs this tenant may have at once (a new job or batch past it is 429 "
        "tenant_backlog_full). Empty: the service's default; 0: no cap.",
    )
    max_batches_in_progress = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Batches this tenant may have received but not yet loaded (another is 429 "
        "tenant_batches_full). Empty: the service's default; 0: no cap.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.CheckConstraint(condition=Q(weight__gte=1), name="tenants_weight_positive")]

    def __str__(self) -> str:
        return self.name


class TokenScope(models.TextChoices):
    """What a token may do (FR-36, docs/tokens.md): ``admin`` everything, tokens and webhook
    secrets included; ``full`` submit, cancel and read; ``read`` list and read only."""

    ADMIN = "admin"
    FULL = "full"
    READ = "read"


class ApiToken(models.Model):
    """A bearer token. Only its SHA-256 is stored; the token itself is shown once at creation.

    Tokens are 32 random bytes, so a fast hash is enough: there is nothing to brute-force."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=200, default="default")
    # First characters of the token, to tell tokens apart in the admin without revealing them.
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Tokens made before scopes existed could do everything: they stay ``admin`` (FR-36).
    scope = models.CharField(max_length=8, choices=TokenScope.choices, default=TokenScope.ADMIN)
    expires_at = models.DateTimeField(null=True, blank=True)
    # Written by the beat task that flushes what requests recorded in Redis (apps/tenants/services.py,
    # ``tokens_last_used_flush``): never by a request, so it lags by up to
    # SCRAPEJOBS_TOKEN_LAST_USED_FLUSH_S (GET /tokens adds what Redis holds).
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.tenant})"
