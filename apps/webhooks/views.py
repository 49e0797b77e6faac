"""A tenant's webhook delivery log, its redelivery, and its disabled callback URLs (FR-38,
docs/webhooks.md): parse, call one webhooks selector or service, answer. Reading takes any token;
redelivering and re-enabling are writes (``full`` or ``admin``)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.api.errors import not_found
from apps.api.serializers import ErrorOutput
from apps.webhooks import selectors
from apps.webhooks.models import DeliveryStatus
from apps.webhooks.services import callbacks_reenable, webhook_deliveries_redeliver

_ERR = OpenApiResponse(ErrorOutput)
_COMMON = {401: _ERR, 429: _ERR}
# What _cursor_encode gives: the page's last id, 8 bytes big-endian, base64url without padding.
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{11}$"


def _tenant_id(request: Request) -> Any:
    return request.user.tenant.id  # type: ignore[union-attr]


def _cursor_encode(delivery_id: int) -> str:
    return base64.urlsafe_b64encode(delivery_id.to_bytes(8, "big")).rstrip(b"=").decode("ascii")


def _cursor_decode(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=")
    except (binascii.Error, ValueError):
        raise serializers.ValidationError({"cursor": ["Not a cursor returned by this API."]}) from None
    return int.from_bytes(raw, "big")


def _int_id(value: str) -> int | None:
    return int(value) if value.isdigit() and len(value) < 19 else None


class DeliveryOutput(serializers.Serializer):
    id = serializers.IntegerField(help_text="The delivery's id: its `webhook-id` header on every try.")
    event = serializers.CharField(help_text="The job's final status, or batch.completed / batch.failed.")
    job = serializers.UUIDField(source="job_id", allow_null=True)
    batch = serializers.UUIDField(source="batch_id", allow_null=True)
    url = serializers.CharField(help_text="The target URL, every query value masked as ***.")
    status = serializers.ChoiceField(choices=DeliveryStatus.choices)
    attempts = serializers.IntegerField()
    last_status_code = serializers.IntegerField(allow_null=True, help_text="The last answer's HTTP status.")
    last_attempt_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField(allow_null=True)
    next_attempt_at = serializers.DateTimeField(allow_null=True, help_text="The next try, while pending.")
    created_at = serializers.DateTimeField()
    delivered_at = serializers.DateTimeField(allow_null=True)


class DeliveryPageOutput(serializers.Serializer):
    items = DeliveryOutput(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class DisabledCallbackOutput(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField(help_text="The receiver URL, every query value masked as ***.")
    disabled_at = serializers.DateTimeField()
    delivery = serializers.IntegerField(
        source="delivery_id", allow_null=True, help_text="The delivery its 410 answered."
    )


class DisabledCallbackListOutput(serializers.Serializer):
    items = DisabledCallbackOutput(many=True)


class WebhookDeliveryListView(APIView):
    class Params(serializers.Serializer):
        status = serializers.ChoiceField(choices=DeliveryStatus.choices, required=False)
        job = serializers.UUIDField(required=False, help_text="The deliveries of one job.")
        limit = serializers.IntegerField(min_value=1, max_value=500, default=50)
        cursor = serializers.RegexField(
            CURSOR_PATTERN,
            required=False,
            error_messages={"invalid": "Not a cursor returned by this API."},
            help_text="next_cursor of the previous page.",
        )

    @extend_schema(
        operation_id="webhook_deliveries_list",
        summary="List webhook deliveries, newest first",
        description="The tenant's webhook deliveries (jobs' and batches'), one page at a time: pass "
        "`next_cursor` back as `cursor` until it is null. Unknown parameters are 400.",
        parameters=[Params],
        responses={200: DeliveryPageOutput, 400: _ERR, **_COMMON},
    )
    def get(self, request: Request) -> Response:
        unknown = sorted(set(request.query_params) - set(self.Params().fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown query parameter."] for name in unknown})
        parsed = self.Params(data=request.query_params.dict())
        parsed.is_valid(raise_exception=True)
        params = parsed.validated_data
        limit = params["limit"]
        rows = selectors.webhook_deliveries_of_tenant(
            tenant_id=_tenant_id(request),
            status=params.get("status"),
            job_id=params.get("job"),
            before_id=_cursor_decode(params["cursor"]) if "cursor" in params else None,
            limit=limit + 1,
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return Response(
            {
                "items": DeliveryOutput(rows, many=True).data,
                "next_cursor": _cursor_encode(rows[-1]["id"]) if more else None,
            }
        )


class WebhookDeliveryRedeliverView(APIView):
    @extend_schema(
        operation_id="webhook_deliveries_redeliver",
        summary="Send a webhook delivery again",
        description="Whatever its status, the delivery is sent again now with a fresh retry schedule: "
        "the same body and the same `webhook-id`, a new timestamp and signature (receivers "
        "deduplicate on the id). A delivery to a disabled callback URL is skipped again until the "
        "URL is re-enabled.",
        request=None,
        responses={202: OpenApiResponse(description="Queued for sending."), 404: _ERR, 403: _ERR, **_COMMON},
    )
    def post(self, request: Request, delivery_id: str) -> Response:
        found = _int_id(delivery_id)
        if found is None or not webhook_deliveries_redeliver(
            delivery_ids=[found], tenant_id=_tenant_id(request)
        ):
            raise not_found("No such webhook delivery.")
        return Response({"id": found, "status": DeliveryStatus.PENDING}, status=202)


class DisabledCallbackListView(APIView):
    @extend_schema(
        operation_id="disabled_callbacks_list",
        summary="List callback URLs switched off by a 410",
        description="A receiver that answered `410 Gone` gets no more deliveries (they are recorded "
        "`skipped`) until it is re-enabled.",
        responses={200: DisabledCallbackListOutput, **_COMMON},
    )
    def get(self, request: Request) -> Response:
        rows = selectors.disabled_callbacks_of_tenant(tenant_id=_tenant_id(request))
        return Response({"items": DisabledCallbackOutput(rows, many=True).data})


class DisabledCallbackEnableView(APIView):
    @extend_schema(
        operation_id="disabled_callbacks_enable",
        summary="Re-enable a callback URL",
        description="Later deliveries to it are sent again; those already skipped stay so until redelivered.",
        request=None,
        responses={204: None, 404: _ERR, 403: _ERR, **_COMMON},
    )
    def post(self, request: Request, callback_id: str) -> Response:
        found = _int_id(callback_id)
        if found is None or not callbacks_reenable(callback_ids=[found], tenant_id=_tenant_id(request)):
            raise not_found("No such disabled callback.")
        return Response(status=204)
