"""Webhook deliveries and their attempt log in the Django admin (contract 8, FR-7).

Read-only; the one thing an operator does is redeliver (with the change permission), through
``apps.webhooks.services.webhook_deliveries_redeliver``.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.admin_mixins import ReadOnlyAdminMixin
from apps.webhooks.models import WebhookAttempt, WebhookDelivery
from apps.webhooks.services import webhook_deliveries_redeliver


class WebhookAttemptInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = WebhookAttempt
    extra = 0
    can_delete = False
    ordering = ("number",)
    fields = readonly_fields = ("number", "started_at", "status_code", "duration_ms", "error")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "job",
        "event",
        "url",
        "status",
        "attempts",
        "last_status_code",
        "last_duration_ms",
        "next_attempt_at",
        "delivered_at",
        "created_at",
    )
    list_filter = ("status", "event")
    search_fields = ("=job__id", "url")
    ordering = ("-id",)
    raw_id_fields = ("job",)
    inlines = (WebhookAttemptInline,)
    actions = ("redeliver",)
    fields = readonly_fields = (
        "job",
        "event",
        "url",
        "body",
        "status",
        "attempts",
        "created_at",
        "next_attempt_at",
        "delivered_at",
        "last_status_code",
        "last_duration_ms",
        "last_error",
    )

    @admin.action(description="Redeliver now (fresh retry schedule)", permissions=["change"])
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        n = webhook_deliveries_redeliver(delivery_ids=queryset.values_list("id", flat=True))
        self.message_user(request, f"{n} deliver(y/ies) will be sent again.", messages.SUCCESS)
