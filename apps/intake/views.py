"""POST /jobs and POST /jobs/{id}/cancel: parse, call one jobs service, answer."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.intake.errors import ApiError, not_found
from apps.intake.parsers import BoundedJSONParser
from apps.intake.serializers import (
    JobCreatedOutput,
    JobCreateInput,
    hostname_of,
    idempotency_key_validate,
    request_fingerprint,
)
from apps.jobs.services import IdempotencyConflict, job_cancel, job_create
from apps.query import selectors
from apps.query.serializers import ErrorOutput, base_url, job_links

_ERR = OpenApiResponse(ErrorOutput)


def _tenant_id(request: Request) -> Any:
    return request.user.tenant.id  # type: ignore[union-attr]


class JobCreateView(APIView):
    parser_classes = [BoundedJSONParser]

    @extend_schema(
        operation_id="jobs_create",
        summary="Submit a scrape job",
        description="Validates the request (unknown fields, values out of bounds, non-http(s) URLs are "
        "400 and create nothing), stores the job and answers at once; a worker fetches it shortly "
        "after. Follow `links.self` (optionally with `?wait=`) for its status.",
        request=JobCreateInput,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="At most 255 characters, per tenant, kept at least 24 h. The same key with "
                "the same body gives back the same job (Idempotent-Replayed: true); with another "
                "body it is 422.",
            ),
            OpenApiParameter(
                "Location", OpenApiTypes.URI, OpenApiParameter.HEADER, response=[202], description="The job."
            ),
            OpenApiParameter(
                "Idempotent-Replayed",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                response=[202],
                description='"true" when the answer is a replay of an earlier request with this key.',
            ),
        ],
        responses={
            202: JobCreatedOutput,
            400: OpenApiResponse(ErrorOutput, description="Invalid JSON or a field out of bounds."),
            401: _ERR,
            413: OpenApiResponse(ErrorOutput, description="Body over SCRAPEJOBS_MAX_REQUEST_BYTES."),
            415: OpenApiResponse(ErrorOutput, description="Content type other than application/json."),
            422: OpenApiResponse(ErrorOutput, description="Idempotency-Key reused with another body."),
            429: _ERR,
        },
    )
    def post(self, request: Request) -> Response:
        key = idempotency_key_validate(request.META.get("HTTP_IDEMPOTENCY_KEY"))
        payload = JobCreateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        try:
            job, created = job_create(
                tenant_id=_tenant_id(request),
                domain=hostname_of(data["url"]),
                idempotency_key=key,
                idempotency_fingerprint=request_fingerprint(data) if key is not None else None,
                **data,
            )
        except IdempotencyConflict:
            raise ApiError(
                status_code=422,
                type="idempotency_error",
                code="idempotency_key_reused",
                detail="This Idempotency-Key was used with a different request body.",
            ) from None
        links = job_links(base=base_url(request), job_id=job.id)
        response = Response(
            {
                "id": str(job.id),
                "status": job.status,
                "links": {"self": links["self"], "result": links["result"]},
            },
            status=202,
            headers={"Location": links["self"]},
        )
        if not created:
            response["Idempotent-Replayed"] = "true"
        return response


class JobCancelView(APIView):
    @extend_schema(
        operation_id="jobs_cancel",
        summary="Cancel a job",
        description="A queued job is cancelled at once (200). A running job is asked to stop (202): "
        "its worker stops at its next check and the job ends `cancelled`. A final job is 409.",
        request=None,
        responses={
            200: OpenApiResponse(
                inline_serializer(
                    "JobCancelled", {"id": serializers.UUIDField(), "status": serializers.CharField()}
                ),
                description='A queued job: now final, status "cancelled".',
            ),
            202: OpenApiResponse(
                inline_serializer(
                    "JobCancelRequested",
                    {
                        "id": serializers.UUIDField(),
                        "status": serializers.CharField(),
                        "cancel_requested": serializers.BooleanField(),
                    },
                ),
                description='A running job: status "running", cancel_requested true; the worker stops '
                "at its next check and the job ends cancelled.",
            ),
            401: _ERR,
            404: _ERR,
            409: OpenApiResponse(ErrorOutput, description="The job is already final."),
            429: _ERR,
        },
    )
    def post(self, request: Request, job_id: str) -> Response:
        tenant_id = _tenant_id(request)
        parsed = selectors.parse_job_id(job_id)
        if parsed is None:
            raise not_found()
        outcome = job_cancel(job_id=parsed, tenant_id=tenant_id)
        if outcome == "cancelled":
            return Response({"id": str(parsed), "status": "cancelled"}, status=200)
        if outcome == "cancel_requested":
            return Response({"id": str(parsed), "status": "running", "cancel_requested": True}, status=202)
        # "final" also covers a job that is not this tenant's: tell the two apart only now, so
        # that the common case costs no extra query.
        if not selectors.job_exists(tenant_id=tenant_id, job_id=parsed):
            raise not_found()
        raise ApiError(status_code=409, type="conflict", code="job_final", detail="The job is already final.")
