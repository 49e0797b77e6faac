from django.urls import path

from apps.webhooks.views import (
    DisabledCallbackEnableView,
    DisabledCallbackListView,
    WebhookDeliveryListView,
    WebhookDeliveryRedeliverView,
)

# A tenant's webhook delivery log and its disabled callback URLs (FR-38).
urlpatterns = [
    path("webhook-deliveries", WebhookDeliveryListView.as_view(), name="webhook-deliveries"),
    path(
        "webhook-deliveries/<str:delivery_id>/redeliver",
        WebhookDeliveryRedeliverView.as_view(),
        name="webhook-delivery-redeliver",
    ),
    path("disabled-callbacks", DisabledCallbackListView.as_view(), name="disabled-callbacks"),
    path(
        "disabled-callbacks/<str:callback_id>/enable",
        DisabledCallbackEnableView.as_view(),
        name="disabled-callback-enable",
    ),
]
