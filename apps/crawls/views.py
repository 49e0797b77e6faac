"""POST /crawls, GET /crawls, GET /crawls/{id}, GET /crawls/{id}/pages, POST /crawls/{id}/cancel:
parse, call one service or selector, answer (FR-39, FR-41, docs/crawls.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.api.errors import ApiError, backlog_refused, not_found
from apps.api.pagination import CURSOR_PATTERN, BadCursor, cursor_decode, cursor_encode
from apps.api.serializers import ErrorOutput, base_url
from apps.crawls import selectors
from apps.crawls.serializers import (
    CrawlCreateInput,
    CrawlListOutput,
    CrawlOutput,
    CrawlPagesOutput,
    crawl_representation,
)
from apps.crawls.services import CrawlIdempotencyConflict, crawl_cancel, crawl_counts, crawl_create
from apps.crawls.warc import crawl_warc_chunks
from apps.intake.parsers import BoundedJSONParser
from apps.intake.serializers import idempotency_key_validate, request_fingerprint
from apps.tenants.backlog import BacklogFull

_ERR = OpenApiResponse(ErrorOutput)


def _tenant_id(request: Request) -> Any:
    return request.user.tenant.id  # type: ignore[union-attr]


def _query(request: Request, params: type[serializers.Serializer]) -> dict[str, Any]:
    unknown = sorted(set(request.query_params) - set(params().fields))
    if unknown:
        raise serializers.ValidationError({name: ["Unknown query parameter."] for name in unknown})
    checked = params(data=request.query_params.dict())
    checked.is_valid(raise_exception=True)
    return dict(checked.validated_data)


class CrawlCreateView(APIView):
    parser_classes = [BoundedJSONParser]

    class ListParams(serializers.Serializer):
        limit = serializers.IntegerField(min_value=1, max_value=500, default=50)
        cursor = serializers.RegexField(
            CURSOR_PATTERN, required=False, error_messages={"invalid": "Not a cursor returned by this API."}
        )

    @extend_schema(
        operation_id="crawls_create",
        summary="Start a crawl",
        description="From its seeds, the pages found by following `<a href>` links within the "
        "scope become ordinary jobs of the crawl, never more than `max_pages` (exactly), each "
        "page once. Answers 202 with the crawl; follow `links.self`. Bad input is 400 and "
        "creates nothing.",
        request=CrawlCreateInput,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="As on POST /jobs: the same key and body give back the same crawl "
                "(Idempotent-Replayed: true); with another body it is 422.",
            ),
        ],
        responses={
            202: CrawlOutput,
            400: _ERR,
            401: _ERR,
            413: _ERR,
            415: _ERR,
            422: OpenApiResponse(ErrorOutput, description="Idempotency-Key reused with another body."),
            429: OpenApiResponse(
                ErrorOutput,
                description="The token's rate limit (rate_limited), or the tenant's queued jobs at their "
                "cap (tenant_backlog_full); with Retry-After. Nothing is created.",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        key = idempotency_key_validate(request.META.get("HTTP_IDEMPOTENCY_KEY"))
        payload = CrawlCreateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        try:
            crawl, created = crawl_create(
                tenant_id=_tenant_id(request),
                seeds=data["seeds"],
                scope=data["scope"],
                include=data["include"],
                exclude=data["exclude"],
                max_pages=data["max_pages"],
                max_depth=data["max_depth"],
                sitemaps=data["sitemaps"],
                job_options=data["job"],
                callback_url=data["callback_url"],
                idempotency_key=key,
                fingerprint=request_fingerprint(data),
            )
        except BacklogFull as full:
            raise backlog_refused(
                code=full.code, detail=full.detail, retry_after_s=full.retry_after_s
            ) from None
        except CrawlIdempotencyConflict:
            raise ApiError(
                status_code=422,
                type="idempotency_error",
                code="idempotency_key_reused",
                detail="This Idempotency-Key was used with a different crawl.",
            ) from None
        body = crawl_representation(crawl, base=base_url(request), counts=crawl_counts(crawl))
        response = Response(body, status=202, headers={"Location": body["links"]["self"]})
        if not created:
            response["Idempotent-Replayed"] = "true"
        return response

    @extend_schema(
        operation_id="crawls_list",
        summary="List crawls, newest first",
        parameters=[ListParams],
        responses={200: CrawlListOutput, 400: _ERR, 401: _ERR, 429: _ERR},
    )
    def get(self, request: Request) -> Response:
        params = _query(request, self.ListParams)
        before = None
        if "cursor" in params:
            try:
                before = cursor_decode(params["cursor"])
            except BadCursor:
                raise serializers.ValidationError(
                    {"cursor": ["Not a cursor returned by this API."]}
                ) from None
        crawls, next_id = selectors.crawl_list(
            tenant_id=_tenant_id(request), before=before, limit=params["limit"]
        )
        base = base_url(request)
        return Response(
            {
                "items": [crawl_representation(c, base=base) for c in crawls],
                "next_cursor": None if next_id is None else cursor_encode(next_id),
            }
        )


class CrawlDetailView(APIView):
    @extend_schema(
        operation_id="crawls_retrieve",
        summary="A crawl's state and counts",
        responses={200: CrawlOutput, 401: _ERR, 404: _ERR, 429: _ERR},
    )
    def get(self, request: Request, crawl_id: str) -> Response:
        crawl = selectors.crawl_get(tenant_id=_tenant_id(request), crawl_id=crawl_id)
        if crawl is None:
            raise not_found("No such crawl.")
        return Response(crawl_representation(crawl, base=base_url(request), counts=crawl_counts(crawl)))


class CrawlPagesView(APIView):
    class Params(serializers.Serializer):
        limit = serializers.IntegerField(min_value=1, max_value=500, default=50)
        cursor = serializers.IntegerField(
            min_value=0, required=False, help_text="next_cursor of the previous page."
        )

    @extend_schema(
        operation_id="crawls_pages",
        summary="A crawl's pages in the order they were found",
        parameters=[Params],
        responses={200: CrawlPagesOutput, 400: _ERR, 401: _ERR, 404: _ERR, 429: _ERR},
    )
    def get(self, request: Request, crawl_id: str) -> Response:
        params = _query(request, self.Params)
        crawl = selectors.crawl_get(tenant_id=_tenant_id(request), crawl_id=crawl_id)
        if crawl is None:
            raise not_found("No such crawl.")
        pages = selectors.crawl_pages(crawl_id=crawl.id, after=params.get("cursor", 0), limit=params["limit"])
        statuses = selectors.crawl_page_statuses([p.job_id for p in pages])
        return Response(
            {
                "items": [
                    {
                        "seq": p.seq,
                        "url": p.url_key,
                        "depth": p.depth,
                        "kind": p.kind,
                        "found_on": p.found_on,
                        "job": str(p.job_id),
                        "status": statuses.get(p.job_id, "unknown"),
                    }
                    for p in pages
                ],
                "next_cursor": pages[-1].seq if len(pages) == params["limit"] else None,
            }
        )


class CrawlCancelView(APIView):
    @extend_schema(
        operation_id="crawls_cancel",
        summary="Cancel a crawl",
        description="The crawl takes no more pages; its queued jobs are cancelled at once and its "
        "running ones asked to stop, as POST /jobs/{id}/cancel does. A crawl already ended is 409.",
        request=None,
        responses={200: CrawlOutput, 401: _ERR, 404: _ERR, 409: _ERR, 429: _ERR},
    )
    def post(self, request: Request, crawl_id: str) -> Response:
        crawl = selectors.crawl_get(tenant_id=_tenant_id(request), crawl_id=crawl_id)
        if crawl is None:
            raise not_found("No such crawl.")
        if crawl.status != "running":
            raise ApiError(
                status_code=409, type="conflict", code="crawl_final", detail=f"The crawl is {crawl.status}."
            )
        crawl_cancel(crawl=crawl)
        crawl.refresh_from_db()
        return Response(crawl_representation(crawl, base=base_url(request), counts=crawl_counts(crawl)))


def _next_chunk(chunks: Iterator[bytes]) -> bytes | None:
    return next(chunks, None)


async def _async_chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Each chunk made in a thread (it reads the database and storage), handed on as made: under
    ASGI a plain iterator would be read whole into memory first."""
    while (chunk := await sync_to_async(_next_chunk, thread_sensitive=True)(chunks)) is not None:
        yield chunk


class CrawlWarcView(APIView):
    @extend_schema(
        operation_id="crawls_warc",
        summary="The crawl's pages as a WARC file",
        description="A gzipped WARC 1.1 file, streamed: a warcinfo record, then one `response` "
        "record per page with a stored body (in the order found), rebuilt from what is stored: "
        "the status, the kept headers with Content-Encoding and Transfer-Encoding dropped and "
        "Content-Length set to the stored, decoded body. A page served by another job's fetch "
        "(single-flight) is a `revisit` record. Pages without a stored body have none. A "
        "`read` token may ask for it (FR-47, docs/crawls.md).",
        responses={
            (200, "application/warc"): OpenApiResponse(OpenApiTypes.BINARY),
            401: _ERR,
            404: _ERR,
            429: _ERR,
        },
    )
    def get(self, request: Request, crawl_id: str) -> StreamingHttpResponse:
        crawl = selectors.crawl_get(tenant_id=_tenant_id(request), crawl_id=crawl_id)
        if crawl is None:
            raise not_found("No such crawl.")
        response = StreamingHttpResponse(
            _async_chunks(crawl_warc_chunks(crawl=crawl)), content_type="application/warc"
        )
        response["Content-Disposition"] = f'attachment; filename="crawl-{crawl.id}.warc.gz"'
        response["Cache-Control"] = "private, no-store"
        return response
