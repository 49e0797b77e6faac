"""A tenant's own tokens and webhook secrets over the API (FR-36, FR-37, docs/tokens.md): parse,
call one tenants service, answer. Apart from apps/tenants because apps/api imports it (its open
pages' throttle) and these views import apps/api. Every view here takes ``admin`` tokens only (``required_scope``, checked by
apps/tenants/authentication.py's TokenScopePermission)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.account.serializers import (
    TokenCreatedOutput,
    TokenCreateInput,
    TokenListOutput,
    UsageOutput,
    UsageParams,
    WebhookSecretRotatedOutput,
    WebhookSecretsOutput,
    token_representation,
)
from apps.api.errors import ApiError, not_found
from apps.api.serializers import ErrorOutput
from apps.operators.selectors import UsageDay, usage_days
from apps.tenants import selectors, services
from apps.tenants.models import TokenScope

_ERR = OpenApiResponse(ErrorOutput)
# A revocation answers once this web process's own listener heard its NOTIFY, or after this long
# (a listener that is reconnecting): services.token_revoke, docs/tokens.md.
REVOKE_HEARD_WAIT_S = 1.0
_ADMIN_ERRORS = {401: _ERR, 403: OpenApiResponse(ErrorOutput, description="Not an admin token."), 429: _ERR}


def _token(request: Request) -> Any:
    return request.user.token  # type: ignore[union-attr]


class TokenCollectionView(APIView):
    required_scope = TokenScope.ADMIN

    @extend_schema(
        operation_id="tokens_list",
        summary="List the tenant's tokens",
        description="Every token not revoked, newest first, expired ones included; never their secrets.",
        responses={200: TokenListOutput, **_ADMIN_ERRORS},
    )
    def get(self, request: Request) -> Response:
        tokens = selectors.tokens_list(tenant_id=_token(request).tenant_id)
        return Response({"items": [token_representation(t) for t in tokens]})

    @extend_schema(
        operation_id="tokens_create",
        summary="Create a token",
        description="The secret is in this answer only; it is stored hashed. A tenant holds at most "
        "SCRAPEJOBS_TENANT_MAX_TOKENS live tokens (409 token_limit_reached); a token that expires "
        "creates only tokens that expire no later (400 token_expiry_invalid).",
        request=TokenCreateInput,
        responses={201: TokenCreatedOutput, 400: _ERR, 409: _ERR, **_ADMIN_ERRORS},
    )
    def post(self, request: Request) -> Response:
        data = TokenCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            token, raw = services.token_issue(by=_token(request), **data.validated_data)
        except services.TokenRefused as refused:
            status = 409 if refused.code == "token_limit_reached" else 400
            kind = "conflict" if status == 409 else "invalid_request"
            raise ApiError(status_code=status, type=kind, code=refused.code, detail=refused.detail) from None
        return Response({**token_representation(token), "token": raw}, status=201)


class TokenDetailView(APIView):
    required_scope = TokenScope.ADMIN

    @extend_schema(
        operation_id="tokens_revoke",
        summary="Revoke a token",
        description="Every web process refuses it from the moment this answers (401); revoking the "
        "token that makes the call is allowed.",
        request=None,
        responses={204: None, 404: _ERR, **_ADMIN_ERRORS},
    )
    def delete(self, request: Request, token_id: str) -> Response:
        if not token_id.isdigit() or not services.token_revoke(
            token_id=int(token_id), tenant_id=_token(request).tenant_id, wait_heard_s=REVOKE_HEARD_WAIT_S
        ):
            raise not_found("No such token.")
        return Response(status=204)


class WebhookSecretsView(APIView):
    required_scope = TokenScope.ADMIN

    @extend_schema(
        operation_id="webhook_secrets_get",
        summary="The tenant's webhook secrets",
        description="When the current secret was made, and the previous one's creation and end of "
        "grace while it still signs; never their values.",
        responses={200: WebhookSecretsOutput, **_ADMIN_ERRORS},
    )
    def get(self, request: Request) -> Response:
        found = selectors.tenant_webhook_secrets_describe(
            tenant_id=_token(request).tenant_id, now=timezone.now()
        )
        return Response(WebhookSecretsOutput(found).data)


class WebhookSecretRotateView(APIView):
    required_scope = TokenScope.ADMIN

    @extend_schema(
        operation_id="webhook_secrets_rotate",
        summary="Rotate the webhook secret",
        description="A new secret signs from now on, shown in this answer only; the one it replaces "
        "signs beside it for SCRAPEJOBS_WEBHOOK_SECRET_GRACE_S (two signatures per delivery), so "
        "receivers can switch without missing one. Rotating again within the grace drops the older one.",
        request=None,
        responses={201: WebhookSecretRotatedOutput, **_ADMIN_ERRORS},
    )
    def post(self, request: Request) -> Response:
        rotated = services.webhook_secret_rotate(tenant_id=_token(request).tenant_id)
        body = {
            "secret": rotated.secret,
            "created_at": rotated.created_at,
            "previous_expires_at": rotated.previous_signs_until,
        }
        return Response(WebhookSecretRotatedOutput(body).data, status=201)


class UsageView(APIView):
    # Any scope reads it (FR-49): a ``read`` token is enough.

    @extend_schema(
        operation_id="usage_get",
        summary="The tenant's usage per day",
        description="Per UTC day from `from` to `to` (both included, at most 366 days): jobs "
        "submitted, attempts by outcome, bytes stored, pages rendered, batches and crawls, with their "
        "totals. Read from daily rollups kept 13 months, up to a rollup interval behind; usage from "
        "before this endpoint was deployed does not exist (zeros). See docs/usage.md.",
        parameters=[UsageParams],
        responses={200: UsageOutput, 400: _ERR, 401: _ERR, 429: _ERR},
    )
    def get(self, request: Request) -> Response:
        unknown = sorted(set(request.query_params) - {"from", "to"})
        if unknown:
            raise serializers.ValidationError({name: ["Unknown query parameter."] for name in unknown})
        params = UsageParams(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        first, last = params.validated_data["from"], params.validated_data["to"]
        days = usage_days(tenant_id=_token(request).tenant_id, first=first, last=last)
        totals = UsageDay(first)
        for day in days:
            totals.add(day)
        return Response(UsageOutput({"from": first, "to": last, "days": days, "totals": totals}).data)
