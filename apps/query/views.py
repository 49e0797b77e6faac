"""GET /jobs, /jobs/{id}, /jobs/{id}/attempts, /jobs/{id}/result: parse, select, represent."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.api.errors import ApiError, not_found
from apps.api.pagination import BadCursor, cursor_decode, cursor_encode
from apps.api.serializers import (
    ErrorOutput,
    JobOutput,
    attempt_representation,
    base_url,
    job_representation,
)
from apps.batches.selectors import batch_exists
from apps.jobs.models import JobStatus, Priority
from apps.query import selectors
from apps.query.serializers import AttemptPageOutput, JobPageOutput, ResultOutput
from apps.results.selectors import ResultGone, result_link

_ERR = OpenApiResponse(ErrorOutput)
_COMMON_ERRORS = {401: _ERR, 404: _ERR, 429: _ERR}


def _query_params(request: Request, serializer_class: type[serializers.Serializer]) -> dict[str, Any]:
    """Validate query parameters; unknown ones are refused like unknown body fields."""
    unknown = sorted(set(request.query_params) - set(serializer_class().fields))
    if unknown:
        raise serializers.ValidationError({name: ["Unknown query parameter."] for name in unknown})
    params = serializer_class(data=request.query_params.dict())
    params.is_valid(raise_exception=True)
    return dict(params.validated_data)


def _tenant_id(request: Request) -> Any:
    return request.user.tenant.id  # type: ignore[union-attr]


class JobListView(APIView):
    class Params(serializers.Serializer):
        status = serializers.ChoiceField(choices=JobStatus.choices, required=False)
        priority = serializers.ChoiceField(choices=Priority.choices, required=False)
        batch = serializers.UUIDField(
            required=False,
            help_text="Jobs of one batch (POST /batches). A batch that is not the caller's is 400.",
        )
        limit = serializers.IntegerField(min_value=1, max_value=500, default=50)
        cursor = serializers.CharField(required=False, help_text="next_cursor of the previous page.")

    @extend_schema(
        operation_id="jobs_list",
        summary="List jobs, newest first",
        description="The caller's jobs, newest first, one page at a time: pass `next_cursor` back as "
        "`cursor` until it is null. A walk never repeats or skips a job; jobs submitted during the walk "
        "are newer than it and show in the next walk. Unknown parameters are 400.",
        parameters=[Params],
        responses={200: JobPageOutput, 400: _ERR, 401: _ERR, 429: _ERR},
    )
    def get(self, request: Request) -> Response:
        params = _query_params(request, self.Params)
        if "batch" in params and not batch_exists(tenant_id=_tenant_id(request), batch_id=params["batch"]):
            # An empty page would make a typo (or another tenant's batch) look like an empty batch.
            raise serializers.ValidationError({"batch": [f"Unknown batch {str(params['batch'])!r}."]})
        before = None
        if "cursor" in params:
            try:
                before = cursor_decode(params["cursor"])
            except BadCursor:
                raise serializers.ValidationError(
                    {"cursor": ["Not a cursor returned by this API."]}
                ) from None
        jobs, next_id = selectors.job_list(
            tenant_id=_tenant_id(request),
            status=params.get("status"),
            priority=params.get("priority"),
            batch_id=params.get("batch"),
            before=before,
            limit=params["limit"],
        )
        base = base_url(request)
        return Response(
            {
                "items": [job_representation(j, base=base) for j in jobs],
                "next_cursor": None if next_id is None else cursor_encode(next_id),
            }
        )


class JobDetailView(APIView):
    class Params(serializers.Serializer):
        wait = serializers.IntegerField(
            min_value=0,
            max_value=30,
            default=0,
            help_text="Hold the answer until the job is final or this many seconds pass.",
        )

    @extend_schema(
        operation_id="jobs_retrieve",
        summary="A job's status",
        description="With `wait=N` the answer is held until the job is final or N seconds pass "
        "(woken by the database the moment the job ends).",
        parameters=[Params],
        responses={200: JobOutput, 400: _ERR, **_COMMON_ERRORS},
    )
    def get(self, request: Request, job_id: str) -> Response:
        params = _query_params(request, self.Params)
        job = selectors.job_wait_final(tenant_id=_tenant_id(request), job_id=job_id, timeout_s=params["wait"])
        if job is None:
            raise not_found()
        return Response(job_representation(job, base=base_url(request)))


class JobAttemptsView(APIView):
    @extend_schema(
        operation_id="jobs_attempts_list",
        summary="A job's attempts, oldest first",
        responses={200: AttemptPageOutput, **_COMMON_ERRORS},
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = selectors.job_get(tenant_id=_tenant_id(request), job_id=job_id)
        if job is None:
            raise not_found()
        return Response({"items": [attempt_representation(a) for a in selectors.attempt_list(job_id=job.id)]})


class JobResultView(APIView):
    @extend_schema(
        operation_id="jobs_result_retrieve",
        summary="A signed, expiring link to a succeeded job's stored body",
        responses={
            200: ResultOutput,
            409: OpenApiResponse(ErrorOutput, description="The job has not succeeded (yet)."),
            410: OpenApiResponse(ErrorOutput, description="Retention removed the stored body."),
            **_COMMON_ERRORS,
        },
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = selectors.job_get(tenant_id=_tenant_id(request), job_id=job_id, with_result=True)
        if job is None:
            raise not_found()
        if job.status != JobStatus.SUCCEEDED:
            raise ApiError(
                status_code=409,
                type="conflict",
                code="job_not_succeeded",
                detail=f"The job is {job.status}; a result exists only once it has succeeded.",
            )
        link = _result_link(job=job, request=request)
        if link is None:
            raise ApiError(
                status_code=410,
                type="gone",
                code="result_expired",
                detail="The result was removed by retention.",
            )
        return Response(
            {
                "url": link["url"],
                "expires_at": link["expires_at"],
                "size": job.result_size,
                "sha256": job.result_sha256,
                "content_type": job.result_content_type,
                "http_status": job.result_http_status,
            }
        )


def _result_link(*, job: Any, request: Request) -> dict[str, Any] | None:
    """The signed link from apps.results, or None when retention removed the body."""
    try:
        link = result_link(job=job, request=request)
    except ResultGone:
        return None
    return {"url": link.url, "expires_at": link.expires_at.isoformat().replace("+00:00", "Z")}
