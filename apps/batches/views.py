"""POST /batches and GET /batches/{id}: parse, call one service, answer."""

from __future__ import annotations

import os
import tempfile
from typing import IO, Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.api.errors import ApiError, backlog_refused, not_found
from apps.api.serializers import ErrorOutput, base_url
from apps.batches import selectors
from apps.batches.formats import CONTENT_TYPES, EXTENSIONS, rows_open
from apps.batches.rows import TooManyColumns, TooManyRows, UnreadableFile
from apps.batches.serializers import BatchCancelOutput, BatchOutput, batch_representation
from apps.batches.services import (
    BatchIdempotencyConflict,
    BatchNotErasable,
    batch_erase_request,
    batch_fingerprint_of,
    batch_submit,
)
from apps.batches.tasks import batch_load_enqueue
from apps.intake.serializers import callback_url_validate, idempotency_key_validate
from apps.jobs.cancel_requeue import jobs_cancel_batch
from apps.tenants.backlog import BacklogFull

_ERR = OpenApiResponse(ErrorOutput)
_UPLOAD_FIELD = "file"


def _tenant_id(request: Request) -> Any:
    return request.user.tenant.id  # type: ignore[union-attr]


def _unsupported() -> ApiError:
    kinds = ", ".join([*CONTENT_TYPES, "multipart/form-data"])
    return ApiError(
        status_code=415,
        type="invalid_request",
        code="unsupported_media_type",
        detail=f"A batch is sent as one of: {kinds} (a file in the field '{_UPLOAD_FIELD}').",
    )


def _too_large(detail: str) -> ApiError:
    return ApiError(status_code=413, type="invalid_request", code="payload_too_large", detail=detail)


# Where the web process's ASGI layer hands over the body it already wrote to a spool file, once
# (scrapejobs/asgi.py's SPOOLED_BODY).
_SPOOLED_BODY = "scrapejobs.spooled_body"


def _spool_body(request: Request) -> IO[bytes]:
    """The raw body in a temporary file (never whole in memory), bounded by the batch limit:
    under ASGI the file the body was written to as it arrived, elsewhere (WSGI, the test client)
    a copy of the stream."""
    spooled = getattr(request._request, "scope", {}).get(_SPOOLED_BODY)
    if spooled is not None:
        spooled.seek(0)
        return spooled  # type: ignore[no-any-return]
    limit = settings.SCRAPEJOBS_BATCH_MAX_BYTES
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the caller
    size = 0
    while chunk := request._request.read(1 << 20):
        size += len(chunk)
        if size > limit:
            spool.close()
            raise _too_large(f"The batch is over {limit} bytes.")
        spool.write(chunk)
    spool.seek(0)
    return spool


def _upload(request: Request) -> tuple[IO[bytes], str]:
    """The submitted file and its format, from the content type (or an upload's file name)."""
    content_type = request.content_type.split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        upload: UploadedFile | None = request._request.FILES.get(_UPLOAD_FIELD)
        if upload is None:
            raise _unsupported()
        kind = CONTENT_TYPES.get((upload.content_type or "").lower()) or EXTENSIONS.get(
            os.path.splitext(upload.name or "")[1].lower()
        )
        if kind is None:
            raise _unsupported()
        if upload.size and upload.size > settings.SCRAPEJOBS_BATCH_MAX_BYTES:
            raise _too_large(f"The batch is over {settings.SCRAPEJOBS_BATCH_MAX_BYTES} bytes.")
        upload.seek(0)
        return upload.file, kind  # type: ignore[return-value]
    kind = CONTENT_TYPES.get(content_type)
    if kind is None:
        raise _unsupported()
    return _spool_body(request), kind


class BatchCreateView(APIView):
    @extend_schema(
        operation_id="batches_create",
        summary="Submit many jobs at once",
        description="A JSON list of job objects, JSON lines, CSV (a header line of field names; "
        "`headers` as a JSON object in its cell) or Parquet, as the body or as the multipart field "
        "`file`. Every row is checked with POST /jobs's rules: bad rows are rejected with their row "
        "number and reasons, good rows become jobs. Answers 202 once the rows are stored as Parquet "
        "parts with their manifest; a loader then loads them (follow `links.self`). With "
        "`callback_url`, the batch itself is announced there once every one of its jobs is final "
        "(docs/webhooks.md).",
        request={
            "application/json": OpenApiTypes.OBJECT,
            "application/x-ndjson": OpenApiTypes.BINARY,
            "text/csv": OpenApiTypes.BINARY,
            "application/vnd.apache.parquet": OpenApiTypes.BINARY,
            "multipart/form-data": {
                "type": "object",
                "properties": {
                    "file": {
                        "type": "string",
                        "format": "binary",
                        "description": "Its own content type (one of the others above) or its file "
                        "name's extension (.json, .jsonl, .ndjson, .csv, .parquet) names its format.",
                    }
                },
                # Without the file the request is 415: nothing says what the batch is.
                "required": [_UPLOAD_FIELD],
            },
        },
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="As on POST /jobs: the same key and file give back the same batch "
                "(Idempotent-Replayed: true); with another file it is 422.",
            ),
            OpenApiParameter(
                "callback_url",
                OpenApiTypes.URI,
                OpenApiParameter.QUERY,
                description="An http(s) URL, checked as a job's callback_url: called once, signed "
                "like every delivery, when every job of the batch is final (type batch.completed), "
                "or the batch failed and its jobs, if any, are final (batch.failed). Part of the "
                "request for Idempotency-Key.",
            ),
        ],
        responses={
            202: BatchOutput,
            400: OpenApiResponse(
                ErrorOutput, description="The file cannot be read in its format, or callback_url is refused."
            ),
            401: _ERR,
            413: OpenApiResponse(
                ErrorOutput,
                description="Over SCRAPEJOBS_BATCH_MAX_BYTES, SCRAPEJOBS_BATCH_MAX_ROWS or SCRAPEJOBS_BATCH_MAX_COLUMNS.",
            ),
            415: _ERR,
            422: OpenApiResponse(ErrorOutput, description="Idempotency-Key reused with another file."),
            429: OpenApiResponse(
                ErrorOutput,
                description="The token's rate limit (rate_limited), the tenant's batches in progress "
                "at their cap (tenant_batches_full), or the batch's rows more than its queued jobs' "
                "room left (tenant_backlog_full); with Retry-After. Nothing is created.",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        key = idempotency_key_validate(request.META.get("HTTP_IDEMPOTENCY_KEY"))
        callback_url = callback_url_validate(request.query_params.get("callback_url"))
        fh, kind = _upload(request)
        with fh:
            fingerprint = batch_fingerprint_of(fh, format=kind, callback_url=callback_url)
            try:
                source = rows_open(fh, format=kind)
                batch, created = batch_submit(
                    tenant_id=_tenant_id(request),
                    source=source,
                    format=kind,
                    idempotency_key=key,
                    fingerprint=fingerprint,
                    callback_url=callback_url,
                    on_accepted=batch_load_enqueue,
                )
            except UnreadableFile as e:
                raise ApiError(
                    status_code=400, type="invalid_request", code="parse_error", detail=str(e)
                ) from None
            except (TooManyRows, TooManyColumns) as e:
                raise _too_large(f"The batch has {e}.") from None
            except BacklogFull as full:
                raise backlog_refused(
                    code=full.code, detail=full.detail, retry_after_s=full.retry_after_s
                ) from None
            except BatchIdempotencyConflict:
                raise ApiError(
                    status_code=422,
                    type="idempotency_error",
                    code="idempotency_key_reused",
                    detail="This Idempotency-Key was used with a different batch.",
                ) from None
        body = batch_representation(batch, base=base_url(request))
        response = Response(body, status=202, headers={"Location": body["links"]["self"]})
        if not created:
            response["Idempotent-Replayed"] = "true"
        return response


class BatchDetailView(APIView):
    @extend_schema(
        operation_id="batches_retrieve",
        summary="A batch's state, counts, rejected rows and its jobs by status",
        responses={200: BatchOutput, 401: _ERR, 404: _ERR, 429: _ERR},
    )
    def get(self, request: Request, batch_id: str) -> Response:
        batch = selectors.batch_get(tenant_id=_tenant_id(request), batch_id=batch_id)
        if batch is None:
            raise not_found("No such batch.")
        jobs = selectors.batch_jobs_by_status(batch_id=batch.id)
        return Response(batch_representation(batch, base=base_url(request), jobs=jobs))

    @extend_schema(
        operation_id="batches_destroy",
        summary="Erase every job of a batch",
        description="Asks for the batch's erasure (FR-53): every job of it is erased as DELETE "
        "/jobs/{id} erases one, in chunks in the background, then the batch's stored objects; "
        "`erasure` on GET /batches/{id} shows the progress. 202 again for a batch already asked. "
        "409 while the batch is loading or has a queued or running job: cancel it first (POST "
        "/batches/{id}/cancel). `admin` and `full` tokens only (docs/erasure.md).",
        request=None,
        responses={202: BatchOutput, 401: _ERR, 404: _ERR, 409: _ERR, 429: _ERR},
    )
    def delete(self, request: Request, batch_id: str) -> Response:
        batch = selectors.batch_get(tenant_id=_tenant_id(request), batch_id=batch_id)
        if batch is None:
            raise not_found("No such batch.")
        try:
            batch = batch_erase_request(batch=batch)
        except BatchNotErasable:
            raise ApiError(
                status_code=409,
                type="conflict",
                code="batch_not_final",
                detail=f"The batch is {batch.status} or has queued or running jobs: cancel it "
                "(POST /batches/{id}/cancel) and erase it once every job has ended.",
            ) from None
        return Response(batch_representation(batch, base=base_url(request)), status=202)


class BatchCancelView(APIView):
    @extend_schema(
        operation_id="batches_cancel",
        summary="Cancel a batch's jobs",
        description="Every queued job of the batch is cancelled at once; every running one is asked "
        "to stop, as POST /jobs/{id}/cancel does; final jobs are left alone. Answers 409 while the "
        "batch is still loading (its rows are not all jobs yet): ask again once it is loaded.",
        request=None,
        responses={200: BatchCancelOutput, 401: _ERR, 404: _ERR, 409: _ERR, 429: _ERR},
    )
    def post(self, request: Request, batch_id: str) -> Response:
        batch = selectors.batch_get(tenant_id=_tenant_id(request), batch_id=batch_id)
        if batch is None:
            raise not_found("No such batch.")
        if batch.status not in ("loaded", "failed"):
            raise ApiError(
                status_code=409,
                type="conflict",
                code="batch_not_loaded",
                detail=f"The batch is {batch.status}: cancel it once it is loaded.",
            )
        cancelled, requested = jobs_cancel_batch(batch_id=batch.id, tenant_id=batch.tenant_id)
        return Response({"id": str(batch.id), "cancelled": cancelled, "cancel_requested": requested})
