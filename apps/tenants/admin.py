"""Tenants and their API tokens in the Django admin (FR-9).

Creating a tenant goes through ``tenant_create`` and a new token through ``token_create``, the same
services ``manage.py create_tenant`` uses. Tokens are stored hashed: the raw token is shown once,
in the message after the action, and never again. Tokens are read-only here (only their prefix is
known), and the webhook secret is never part of a form.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.admin_mixins import ReadOnlyAdminMixin
from apps.tenants.models import ApiToken, Tenant
from apps.tenants.services import tenant_create, token_create, token_revoke, webhook_secret_rotate


class ApiTokenInline(ReadOnlyAdminMixin, admin.TabularInline):
    """Read-only: the "Create a new API token" action makes tokens, and shows them once."""

    model = ApiToken
    extra = 0
    can_delete = False
    fields = ("name", "prefix", "created_at", "revoked_at")
    readonly_fields = fields
    verbose_name = "API token (only its first characters are known)"


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "id",
        "is_active",
        "rate_limit_per_second",
        "weight",
        "share_fetches",
        "token_count",
        "created_at",
    )
    list_filter = ("is_active", "share_fetches")
    search_fields = ("name", "=id")
    fields = (
        "name",
        "rate_limit_per_second",
        "weight",
        "is_active",
        "obey_robots",
        "share_fetches",
        "max_queued_jobs",
        "max_batches_in_progress",
        "id",
        "created_at",
        "webhook_secret_previous_until",
    )
    readonly_fields = ("id", "created_at", "webhook_secret_previous_until")
    inlines = (ApiTokenInline,)
    actions = ("create_token", "rotate_webhook_secret")

    @admin.display(description="tokens")
    def token_count(self, obj: Tenant) -> int:
        return obj.tokens.filter(revoked_at__isnull=True).count()

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        created = tenant_create(name=obj.name, rate_limit_per_second=obj.rate_limit_per_second)
        # The form's other fields, which the service does not take.
        Tenant.objects.filter(pk=created.tenant.pk).update(
            is_active=obj.is_active,
            weight=obj.weight,
            obey_robots=obj.obey_robots,
            share_fetches=obj.share_fetches,
            max_queued_jobs=obj.max_queued_jobs,
            max_batches_in_progress=obj.max_batches_in_progress,
        )
        # The admin goes on with `obj` (log entry, redirect): make it the row the service made.
        obj.pk = created.tenant.pk
        obj.webhook_secret = created.webhook_secret
        obj.created_at = created.tenant.created_at
        obj._state.adding = False
        obj._state.db = created.tenant._state.db
        messages.warning(
            request,
            f"Tenant {obj.name!r} created. Copy these now, they are not shown again: "
            f"token: {created.token}   webhook_secret: {created.webhook_secret}",
        )

    @admin.action(description="Create a new API token (shown once)", permissions=["change"])
    def create_token(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        for tenant in queryset:
            token = token_create(tenant=tenant, name=f"admin:{request.user.get_username()}")
            messages.warning(
                request, f"New token for {tenant.name!r} (copy it now, it is not shown again): {token}"
            )

    @admin.action(description="Rotate the webhook secret (new one shown once)", permissions=["change"])
    def rotate_webhook_secret(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        for tenant in queryset:
            rotated = webhook_secret_rotate(tenant_id=tenant.pk)
            messages.warning(
                request,
                f"New webhook secret for {tenant.name!r} (copy it now, it is not shown again): "
                f"{rotated.secret}   the old one keeps signing beside it until "
                f"{rotated.previous_signs_until:%Y-%m-%d %H:%M:%S} UTC",
            )


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Tokens by prefix; revoking goes through ``token_revoke`` (read-only otherwise). None is
    added here (the tenant's "Create a new API token" action makes them, shown once) and none is
    deleted: a revoked row keeps who had access and until when."""

    list_display = ("prefix", "tenant", "name", "created_at", "revoked_at")
    list_filter = ("revoked_at", "tenant")
    search_fields = ("prefix", "tenant__name")
    fields = ("tenant", "name", "prefix", "created_at", "revoked_at")
    readonly_fields = fields
    actions = ("revoke",)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked = sum(token_revoke(token_id=pk) for pk in queryset.values_list("pk", flat=True))
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)
