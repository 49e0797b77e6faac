"""Webhook deliveries and their attempt log in the Django admin (FR-9, FR-14, FR-7).

Read-only; the one thing an operator does is redeliver (with the change permission), through
``apps.webhooks.services.webhook_deliveries_redeliver``, and re-enable a callback URL that a
``410 Gone`` disabled (FR-23), through ``callbacks_reenable``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html

from apps.admin_mixins import ReadOnlyAdminMixin
from apps.webhooks.models import DeliveryStatus, DisabledCallback, WebhookAttempt, WebhookDelivery
from apps.webhooks.services import callbacks_reenable, webhook_deliveries_redeliver


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
        "batch_id",
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
        "batch_id",
        "tenant",
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

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Deliveries to a disabled URL are `skipped`: say why, and where to undo it (FR-23).
        disabled = DisabledCallback.objects.count()
        if disabled:
            messages.warning(
                request,
                format_html(
                    "{} callback URL(s) answered 410 Gone and are disabled: deliveries to them are "
                    'recorded as skipped and not sent. <a href="{}">Re-enable them here</a>.',
                    disabled,
                    reverse("admin:webhooks_disabledcallback_changelist"),
                ),
            )
        elif request.GET.get("status__exact") == DeliveryStatus.SKIPPED:
            messages.info(request, "No callback URL is disabled now; skipped deliveries can be redelivered.")
        return super().changelist_view(request, extra_context)

    @admin.action(description="Redeliver now (fresh retry schedule)", permissions=["change"])
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        n = webhook_deliveries_redeliver(delivery_ids=queryset.values_list("id", flat=True))
        self.message_user(request, f"{n} deliver(y/ies) will be sent again.", messages.SUCCESS)


@admin.register(DisabledCallback)
class DisabledCallbackAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Callback URLs disabled by a 410 Gone, per tenant; re-enabling deletes the row."""

    list_display = ("url", "tenant", "disabled_at", "delivery")
    list_filter = ("tenant",)
    search_fields = ("url",)
    ordering = ("-disabled_at",)
    fields = readonly_fields = ("tenant", "url", "disabled_at", "delivery")
    actions = ("reenable",)

    @admin.action(description="Re-enable: send later deliveries to these URLs again", permissions=["change"])
    def reenable(self, request: HttpRequest, queryset: QuerySet[DisabledCallback]) -> None:
        n = callbacks_reenable(callback_ids=queryset.values_list("id", flat=True))
        self.message_user(request, f"{n} callback URL(s) re-enabled.", messages.SUCCESS)
