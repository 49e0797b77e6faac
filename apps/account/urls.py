from django.urls import path

from apps.account.views import (
    TokenCollectionView,
    TokenDetailView,
    UsageView,
    WebhookSecretRotateView,
    WebhookSecretsView,
)

# A tenant's own tokens and webhook secrets (FR-36, FR-37), admin tokens only.
urlpatterns = [
    path("tokens", TokenCollectionView.as_view(), name="tokens"),
    path("tokens/<str:token_id>", TokenDetailView.as_view(), name="token-detail"),
    path("webhook-secrets", WebhookSecretsView.as_view(), name="webhook-secrets"),
    path("webhook-secrets/rotate", WebhookSecretRotateView.as_view(), name="webhook-secrets-rotate"),
    # Any token of the tenant (FR-49, docs/usage.md).
    path("usage", UsageView.as_view(), name="usage"),
]
