from __future__ import annotations

import uuid

from django.db import models


class Tenant(models.Model):
    """Who owns jobs. Every API token belongs to exactly one tenant."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200, unique=True)
    # Signs webhook deliveries (HMAC-SHA256); shown to the operator once, like a token.
    webhook_secret = models.CharField(max_length=128)
    # Requests per second per token for this tenant; null: the service default.
    rate_limit_per_second = models.PositiveIntegerField(null=True, blank=True)
    is_active = models.BooleanField(default=True)
    # Single-flight fetch across tenants: an identical request of another tenant that also allows
    # it may be served this tenant's fetch, and the other way round. Off by default: only an
    # operator switches it on (the admin).
    share_fetches = models.BooleanField(
        default=False,
        help_text="Share identical fetches with other tenants that also share theirs.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


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

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.tenant})"
