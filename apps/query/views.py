"""GET /jobs, /jobs/{id}, /jobs/{id}/attempts, /jobs/{id}/result: parse, select, represent."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpRequest, HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.api.errors import ApiError, job_erased, not_found
from apps.api.ids import parse_job_id
from apps.api.pagination import CURSOR_PATTERN, BadCursor, cursor_decode, cursor_encode
from apps.api.serializers import (
    ErrorOutput,
    JobOutput,
    attempt_representation,
    base_url,
    job_representation,
)
from apps.batches.selectors import batch_exists
from apps.crawls.selectors import crawl_exists
from apps.erasure.services import ErasureStorageFailed, JobNotFinal, job_erase
from apps.jobs.models import JobStatus, Priority
from apps.query import cache, selectors
from apps.query.serializers import AttemptPageOutput, JobPageOutput, ResultOutput
from apps.query.waiting import final_hub
from apps.results.selectors import ResultGone, result_link, screenshot_link

_ERR = OpenApiResponse(ErrorOutput)
_COMMON_ERRORS = {401: _ERR, 404: _ERR, 429: _ERR}
_ERASED = OpenApiResponse(ErrorOutput, description="The job was erased (job_erased, FR-52).")


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
            help_text="Jobs of one batch (POST /batches). A batch that is not the caller's is 404, "
            "as on GET /batches/{batch_id}.",
        )
        changed = serializers.ChoiceField(
            choices=["true", "false"],
            required=False,
            help_text="Only succeeded jobs whose body changed (true) or not (false) since the previous "
            "fetch of the same request; only jobs that asked (revalidate or callback_on) are compared.",
        )
        crawl = serializers.UUIDField(
            required=False,
            help_text="Jobs of one crawl (POST /crawls, docs/crawls.md): its pages. A crawl that is not "
            "the caller's is 404.",
        )
        limit = serializers.IntegerField(min_value=1, max_value=500, default=50)
        cursor = serializers.RegexField(
            CURSOR_PATTERN,
            required=False,
            error_messages={"invalid": "Not a cursor returned by this API."},
            help_text="next_cursor of the previous page.",
        )

    @extend_schema(
        operation_id="jobs_list",
        summary="List jobs, newest first",
        description="The caller's jobs, newest first, one page at a time: pass `next_cursor` back as "
        "`cursor` until it is null. A walk never repeats or skips a job; jobs submitted during the walk "
        "are newer than it and show in the next walk. Unknown parameters are 400.",
        parameters=[Params],
        responses={
            200: JobPageOutput,
            400: _ERR,
            401: _ERR,
            404: OpenApiResponse(
                ErrorOutput, description="No such batch or crawl (the `batch` or `crawl` parameter)."
            ),
            429: _ERR,
        },
    )
    def get(self, request: Request) -> Response:
        params = _query_params(request, self.Params)
        if "batch" in params and not batch_exists(tenant_id=_tenant_id(request), batch_id=params["batch"]):
            # An empty page would make a typo (or another tenant's batch) look like an empty batch.
            # Not a 400: the request is well formed (and its document cannot say which batches
            # exist); it names a batch the caller has not got, as GET /batches/{batch_id} would.
            raise not_found(f"No such batch {str(params['batch'])!r}.")
        if "crawl" in params and not crawl_exists(tenant_id=_tenant_id(request), crawl_id=params["crawl"]):
            raise not_found(f"No such crawl {str(params['crawl'])!r}.")
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
            # A crawl's pages are keyed as a batch's rows (apps/crawls/models.py). Given both, one
            # of the two is 404 above: no id is a batch's and a crawl's.
            batch_id=params.get("batch") or params.get("crawl"),
            changed=None if "changed" not in params else params["changed"] == "true",
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


JOB_WAIT_MAX_S = 30


class JobDetailView(APIView):
    """The read of GET /jobs/{id}: authenticate, validate, read the job through the cache. The
    URL is served by ``job_detail`` below, which runs this view and, for ``?wait=``, waits."""

    class Params(serializers.Serializer):
        wait = serializers.IntegerField(
            min_value=0,
            max_value=JOB_WAIT_MAX_S,
            default=0,
            help_text="Hold the answer until the job is final or this many seconds pass.",
        )

    @extend_schema(
        operation_id="jobs_retrieve",
        summary="A job's status",
        description="With `wait=N` the answer is held until the job is final or N seconds pass "
        "(woken by the database the moment the job ends; a waiting call holds no database "
        "connection). Answers may come from a cache that shows a change within 2 s, at once "
        "when the job ends.",
        parameters=[Params],
        responses={200: JobOutput, 400: _ERR, 410: _ERASED, **_COMMON_ERRORS},
    )
    def get(self, request: Request, job_id: str) -> Response:
        params = _query_params(request, self.Params)
        job = cache.job_read(tenant_id=_tenant_id(request), job_id=job_id)
        if job is None:
            raise not_found()
        if job.status == JobStatus.ERASED:
            raise job_erased()
        base = base_url(request)
        response = Response(job_representation(job, base=base))
        response.wait_s = 0 if job.is_final else params["wait"]  # type: ignore[attr-defined]
        # What a waiter's re-reads need: they are this request's, authenticated and counted
        # against the rate limit once, here (FR-16).
        response.reread = (_tenant_id(request), job.id, base)  # type: ignore[attr-defined]
        return response

    @extend_schema(
        operation_id="jobs_destroy",
        summary="Erase a final job",
        description="Removes the job's stored body and screenshot (a body another job was served "
        "stays while that job refers to it), its request (URL, headers, body), what was kept of the "
        "answer, its webhook deliveries' URLs and bodies; the job stays as a tombstone with status "
        "`erased` in lists and counts, and GET answers 410 `job_erased`. A queued or running job is "
        "409: cancel it first. `admin` and `full` tokens only (docs/erasure.md).",
        request=None,
        responses={
            204: None,
            409: OpenApiResponse(ErrorOutput, description="The job is queued or running."),
            503: OpenApiResponse(
                ErrorOutput, description="The storage refused a delete: nothing was erased."
            ),
            **_COMMON_ERRORS,
        },
    )
    def delete(self, request: Request, job_id: str) -> Response:
        parsed = parse_job_id(job_id)
        if parsed is None:
            raise not_found()
        try:
            found = job_erase(tenant_id=_tenant_id(request), job_id=parsed)
        except JobNotFinal as e:
            raise ApiError(
                status_code=409,
                type="conflict",
                code="job_not_final",
                detail=f"The job is {e.status}: cancel it first (POST /jobs/{{id}}/cancel), then erase it.",
            ) from None
        except ErasureStorageFailed:
            raise ApiError(
                status_code=503,
                type="unavailable",
                code="storage_unavailable",
                detail="The result storage refused a delete; nothing was erased. Ask again.",
            ) from None
        if not found:
            raise not_found()
        return Response(status=204)


_job_detail_read = JobDetailView.as_view()


def _read_and_release(request: HttpRequest, job_id: str) -> HttpResponse:
    """One read of the job (the DRF view), then the request's database connection goes back to
    the pool: a waiting request must not hold one."""
    try:
        return _job_detail_read(request, job_id=job_id)
    finally:
        if not connection.in_atomic_block:  # a test's transaction is the test's to end
            connection.close()


_read = sync_to_async(_read_and_release)
# A waiter's reads run on the shared executor: a thread of the request's own (Django's default
# for sync code under ASGI) would stay with the request, idle, for the whole wait.
_read_for_waiter = sync_to_async(_read_and_release, thread_sensitive=False)


@sync_to_async(thread_sensitive=False)
def _reread(response: HttpResponse) -> bool:
    """A waiter's read after a wake-up: the job through the cache, into the answer the view made
    (not rendered yet), with no second authentication or rate-limit charge (FR-16). False when the
    job is gone (pruned meanwhile): the caller asks the view again."""
    tenant_id, job_id, base = response.reread  # type: ignore[attr-defined]
    try:
        job = cache.job_read(tenant_id=tenant_id, job_id=job_id)
    finally:
        if not connection.in_atomic_block:
            connection.close()
    if job is None:
        return False
    response.data = job_representation(job, base=base)  # type: ignore[attr-defined]
    if job.is_final:
        response.wait_s = 0  # type: ignore[attr-defined]
    return True


async def job_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    """GET /jobs/{id}[?wait=N]: a plain read, or a wait that holds no connection and no thread.

    The waiter registers with its process's hub before it reads (a change after the read wakes
    it: FR-15), gives its connection back, then sleeps on an event until the hub says the
    job may have changed (its notice, or the hub's timed re-check), reads again, and answers once
    the job is final or the time is up."""
    parsed = parse_job_id(job_id)
    if parsed is None or request.method != "GET" or not _asks_to_wait(request.GET.get("wait", "")):
        return await _read(request, job_id)  # the view answers, refusals included
    with final_hub().watch(str(parsed)) as changed:
        response = await _read_for_waiter(request, job_id)
        deadline = time.monotonic() + getattr(response, "wait_s", 0)
        while getattr(response, "wait_s", 0) and (left := deadline - time.monotonic()) > 0:
            try:
                await asyncio.wait_for(changed.wait(), timeout=left)
            except TimeoutError:
                break
            changed.clear()  # before the read: a change after it sets the event again
            if not await _reread(response):
                return await _read_for_waiter(request, job_id)
    return response


def _asks_to_wait(wait: str) -> bool:
    """A valid, non-zero ``wait`` (anything else the view answers at once, or refuses)."""
    return wait.isascii() and wait.isdigit() and 1 <= int(wait) <= JOB_WAIT_MAX_S


# drf-spectacular documents the URL from the DRF view that does the reading.
job_detail.cls = JobDetailView  # type: ignore[attr-defined]
job_detail.initkwargs = {}  # type: ignore[attr-defined]


class JobAttemptsView(APIView):
    @extend_schema(
        operation_id="jobs_attempts_list",
        summary="A job's attempts, oldest first",
        responses={200: AttemptPageOutput, 410: _ERASED, **_COMMON_ERRORS},
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = selectors.job_get(tenant_id=_tenant_id(request), job_id=job_id)
        if job is None:
            raise not_found()
        if job.status == JobStatus.ERASED:
            raise job_erased()
        attempts = list(selectors.attempt_list(job_id=job.id))
        own = selectors.jobs_of_tenant(
            tenant_id=_tenant_id(request), job_ids={a.served_from_job for a in attempts if a.served_from_job}
        )
        return Response({"items": [attempt_representation(a, own_jobs=own) for a in attempts]})


class JobResultView(APIView):
    @extend_schema(
        operation_id="jobs_result_retrieve",
        summary="A signed, expiring link to a succeeded job's stored body",
        responses={
            200: ResultOutput,
            409: OpenApiResponse(ErrorOutput, description="The job has not succeeded (yet)."),
            410: OpenApiResponse(
                ErrorOutput, description="Retention removed the stored body, or the job was erased."
            ),
            **_COMMON_ERRORS,
        },
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = selectors.job_get(tenant_id=_tenant_id(request), job_id=job_id, with_result=True)
        if job is None:
            raise not_found()
        if job.status == JobStatus.ERASED:
            raise job_erased()
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
                "screenshot": _screenshot_link(job=job, request=request),
                "headers": job.result_headers or {},
            }
        )


def _screenshot_link(*, job: Any, request: Request) -> dict[str, Any] | None:
    try:
        link = screenshot_link(job=job, request=request)
    except ResultGone:
        return None
    if link is None:
        return None
    return {
        "url": link.url,
        "expires_at": link.expires_at.isoformat().replace("+00:00", "Z"),
        "content_type": "image/png",
    }


def _result_link(*, job: Any, request: Request) -> dict[str, Any] | None:
    """The signed link from apps.results, or None when retention removed the body."""
    try:
        link = result_link(job=job, request=request)
    except ResultGone:
        return None
    return {"url": link.url, "expires_at": link.expires_at.isoformat().replace("+00:00", "Z")}
