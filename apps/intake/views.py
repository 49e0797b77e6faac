"""POST /jobs and POST /jobs/{id}/cancel: parse, call one jobs service, answer."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.api import selectors
from apps.api.errors import ApiError, backlog_refused, error_body, not_found
from apps.api.job_view import job_links
from apps.api.serializers import ErrorOutput, base_url
from apps.intake.lean import job_create_input_lean
from apps.intake.parsers import BoundedJSONParser
from apps.intake.serializers import (
    JobCreatedOutput,
    JobCreateInput,
    hostname_of,
    idempotency_key_validate,
    request_fingerprint,
)
from apps.jobs.cancel_requeue import job_cancel
from apps.jobs.intake import IdempotencyConflict, job_create
from apps.tenants.authentication import BearerTokenAuthentication, TenantPrincipal
from apps.tenants.backlog import BacklogFull, tenant_job_room_done, tenant_job_room_take
from apps.tenants.models import TokenScope
from apps.tenants.throttling import token_rate_take

_ERR = OpenApiResponse(ErrorOutput)


def _tenant_id(request: Request) -> Any:
    return request.user.tenant.id  # type: ignore[union-attr]


def _json(data: dict[str, Any], *, status: int) -> HttpResponse:
    """What DRF's JSONRenderer writes: compact, UTF-8, U+2028/U+2029 escaped."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return HttpResponse(text.encode(), status=status, content_type="application/json")


def _idempotency_conflict() -> ApiError:
    return ApiError(
        status_code=422,
        type="idempotency_error",
        code="idempotency_key_reused",
        detail="This Idempotency-Key was used with a different request body.",
    )


def _room_take(tenant: Any, key: str | None) -> bool:
    """Take room for one job in the tenant's backlog (FR-20), or raise the 429; False when no
    room was taken: a retry of a request already accepted under its Idempotency-Key is answered
    as before, full or not."""
    try:
        tenant_job_room_take(tenant=tenant)
    except BacklogFull as full:
        if key is not None and selectors.job_idempotency_key_held(tenant_id=tenant.id, key=key):
            return False
        raise backlog_refused(code=full.code, detail=full.detail, retry_after_s=full.retry_after_s) from None
    return True


def _create(tenant: Any, data: dict[str, Any], key: str | None) -> tuple[Any, bool]:
    """job_create within the tenant's backlog cap; the room taken goes back when nothing new was
    created (a replay, a conflict, a failure)."""
    taken = _room_take(tenant, key)
    created = False
    try:
        job, created = job_create(
            tenant_id=tenant.id,
            domain=hostname_of(data["url"]),
            idempotency_key=key,
            idempotency_fingerprint=request_fingerprint(data) if key is not None else None,
            **data,
        )
    finally:
        if taken:
            tenant_job_room_done(tenant=tenant, created=created)
    return job, created


def _accepted(job: Any, links: dict[str, str]) -> dict[str, Any]:
    """The 202 body of a submission, the same on the lean path and DRF's."""
    return {
        "id": str(job.id),
        "status": job.status,
        "links": {"self": links["self"], "result": links["result"]},
    }


def _lean_shaped(request: HttpRequest) -> bool:
    """Whether the request is an ordinary JSON submission the lean path may answer: UTF-8 JSON
    in, JSON out (no ``?format=``), a body of a length Django reads."""
    meta = request.META
    if (
        request.content_type != "application/json"
        or (request.content_params or {}).get("charset", "utf-8").lower() not in ("utf-8", "utf8")
        or meta.get("HTTP_ACCEPT", "*/*") not in ("*/*", "application/json")
        or meta.get("QUERY_STRING")  # ?format= would change the renderer
    ):
        return False
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return False
    # A body over SCRAPEJOBS_MAX_REQUEST_BYTES never gets here (scrapejobs/asgi.py, middleware.py);
    # Django's own bound, the same number in settings, is the one request.body raises on.
    return 0 < length <= (settings.DATA_UPLOAD_MAX_MEMORY_SIZE or length)


def _lean_created(
    request: HttpRequest, principal: TenantPrincipal, data: dict[str, Any], key: str | None
) -> HttpResponse:
    """The lean path's answer once the job is valid and its token spent: 202, or DRF's 422 for a
    reused key and 429 for a full backlog, written as DRF writes them."""
    try:
        job, created = _create(principal.tenant, data, key)
    except IdempotencyConflict:
        conflict = _idempotency_conflict()
        return _json(
            error_body(type=conflict.type, code=conflict.code, detail=str(conflict.detail)), status=422
        )
    except ApiError as refused:  # the tenant's backlog is full
        response = _json(
            error_body(type=refused.type, code=refused.code, detail=str(refused.detail)),
            status=refused.status_code,
        )
        response["Retry-After"] = str(refused.wait)  # type: ignore[attr-defined]
        return response
    links = job_links(base=base_url(request), job_id=job.id)
    response = _json(_accepted(job, links), status=202)
    response["Location"] = links["self"]
    if not created:
        response["Idempotent-Replayed"] = "true"
    return response


class JobCreateView(APIView):
    parser_classes = [BoundedJSONParser]

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        """POST /jobs takes the lean path (no DRF request, negotiation, parser or serializer:
        about half of a submit's CPU) whenever the request is an ordinary one; anything else, and
        every refusal, goes through DRF's path below, which answers exactly as it always has."""
        if request.method == "POST":
            response = self._post_lean(request)
            if response is not None:
                return response
        return super().dispatch(request, *args, **kwargs)

    def _post_lean(self, request: HttpRequest) -> HttpResponse | None:
        """The answer to a valid submission, or None when DRF's path must answer. Nothing with a
        side effect runs before the last None: the token bucket is spent only for a request that
        is then created (a refused one is counted once, by DRF's path)."""
        if not _lean_shaped(request):
            return None
        try:
            found = BearerTokenAuthentication().authenticate(request)  # type: ignore[arg-type]
        except exceptions.AuthenticationFailed:
            return None
        if found is None:
            return None
        principal: TenantPrincipal = found[0]
        if principal.token.scope == TokenScope.READ:
            return None  # DRF's path refuses it: 403 token_scope_insufficient (FR-36)
        raw_key = request.META.get("HTTP_IDEMPOTENCY_KEY")
        try:
            key = idempotency_key_validate(raw_key)
            data = job_create_input_lean(json.loads(request.body.decode(), parse_constant=_no_constant))
        except (ValueError, RecursionError, serializers.ValidationError):
            return None
        if data is None:
            return None
        allowed, _ = token_rate_take(principal)
        if not allowed:
            return None  # DRF's throttle refuses it too (a refusal spends no token) and says 429
        response = _lean_created(request, principal, data, key)
        response["Allow"] = ", ".join(self.allowed_methods)
        return response

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
            429: OpenApiResponse(
                ErrorOutput,
                description="The token's rate limit (rate_limited), or the tenant's queued jobs at "
                "their cap (tenant_backlog_full); with Retry-After.",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        key = idempotency_key_validate(request.META.get("HTTP_IDEMPOTENCY_KEY"))
        payload = JobCreateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        try:
            job, created = _create(request.user.tenant, data, key)  # type: ignore[union-attr]
        except IdempotencyConflict:
            raise _idempotency_conflict() from None
        links = job_links(base=base_url(request), job_id=job.id)
        response = Response(_accepted(job, links), status=202, headers={"Location": links["self"]})
        if not created:
            response["Idempotent-Replayed"] = "true"
        return response


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: DRF's parser refuses them too


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
            413: OpenApiResponse(
                ErrorOutput, description="A body (none is needed) over SCRAPEJOBS_MAX_REQUEST_BYTES."
            ),
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
