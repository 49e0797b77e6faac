"""Every API error is one JSON shape (FR-1 to FR-7, "Errors"):

    {"type": "<category>", "code": "<machine-readable reason>", "detail": "<human text>",
     "fields": {"<field>": ["<message>", ...]}}      # "fields" only on validation errors

``type`` is the broad category a client branches on; ``code`` the precise reason. The table of
(status, type, code) is ``ERRORS`` below; the README and the OpenAPI document repeat it.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from apps.api.paths import API_PATH_PREFIX

logger = logging.getLogger(__name__)


class ApiError(exceptions.APIException):
    """An error a view raises on purpose, with its place in the error table."""

    def __init__(self, *, status_code: int, type: str, code: str, detail: str):
        super().__init__(detail=detail, code=code)
        self.status_code = status_code
        self.type = type
        self.code = code


def backlog_refused(*, code: str, detail: str, retry_after_s: int) -> ApiError:
    """A submission past one of the tenant's backlog caps (apps/tenants/backlog.py): a 429 with
    ``Retry-After`` (DRF's handler writes it from ``wait``)."""
    error = ApiError(status_code=429, type="rate_limited", code=code, detail=detail)
    error.wait = retry_after_s  # type: ignore[attr-defined]
    return error


def not_found(detail: str = "No such job.") -> ApiError:
    # Another tenant's job is indistinguishable from a missing one (NFR-6: tenants isolated).
    return ApiError(status_code=404, type="not_found", code="not_found", detail=detail)


def job_erased() -> ApiError:
    # An erased job's tombstone (FR-52): it was the caller's, and is gone for good.
    return ApiError(
        status_code=410, type="gone", code="job_erased", detail="The job was erased at the tenant's request."
    )


def payload_too_large() -> ApiError:
    return ApiError(
        status_code=413,
        type="invalid_request",
        code="payload_too_large",
        detail=f"The request body is over {settings.SCRAPEJOBS_MAX_REQUEST_BYTES} bytes.",
    )


def body_unreadable() -> ApiError:
    return ApiError(
        status_code=400,
        type="invalid_request",
        code="parse_error",
        detail="The request body could not be read.",
    )


def length_required() -> ApiError:
    return ApiError(
        status_code=411,
        type="invalid_request",
        code="length_required",
        detail="A request body needs a Content-Length header here.",
    )


# DRF's own exceptions → (type, code). Anything else DRF knows falls back to its own code, and
# so does a PermissionDenied of ours (apps/tenants/authentication.py: token_scope_insufficient).
_DRF_TYPES: dict[type[exceptions.APIException], tuple[str, str | None]] = {
    exceptions.ParseError: ("invalid_request", "parse_error"),
    exceptions.NotAuthenticated: ("authentication_error", "not_authenticated"),
    exceptions.AuthenticationFailed: ("authentication_error", "authentication_failed"),
    exceptions.PermissionDenied: ("permission_error", None),
    exceptions.NotFound: ("not_found", "not_found"),
    exceptions.MethodNotAllowed: ("invalid_request", "method_not_allowed"),
    exceptions.NotAcceptable: ("invalid_request", "not_acceptable"),
    exceptions.UnsupportedMediaType: ("invalid_request", "unsupported_media_type"),
    exceptions.Throttled: ("rate_limited", "rate_limited"),
}

# status, type, code: the complete list, for the docs and the schema.
ERRORS: list[tuple[int, str, str]] = [
    (400, "validation_error", "invalid"),
    (400, "invalid_request", "parse_error"),
    (400, "invalid_request", "token_expiry_invalid"),
    (401, "authentication_error", "not_authenticated"),
    (401, "authentication_error", "authentication_failed"),
    (403, "permission_error", "token_scope_insufficient"),
    (404, "not_found", "not_found"),
    (405, "invalid_request", "method_not_allowed"),
    (409, "conflict", "job_not_succeeded"),
    (409, "conflict", "job_final"),
    (409, "conflict", "token_limit_reached"),
    (410, "gone", "result_expired"),
    (411, "invalid_request", "length_required"),
    (413, "invalid_request", "payload_too_large"),
    (414, "invalid_request", "uri_too_long"),  # answered by the web worker (scrapejobs/web_worker.py)
    (415, "invalid_request", "unsupported_media_type"),
    (422, "idempotency_error", "idempotency_key_reused"),
    (429, "rate_limited", "rate_limited"),
    (429, "rate_limited", "tenant_backlog_full"),
    (429, "rate_limited", "tenant_batches_full"),
    (431, "invalid_request", "headers_too_large"),  # the web worker's too
    (500, "server_error", "internal_error"),
]


def error_body(*, type: str, code: str, detail: str, fields: dict[str, list[str]] | None = None) -> dict:
    body: dict[str, Any] = {"type": type, "code": code, "detail": detail}
    if fields is not None:
        body["fields"] = fields
    return body


def api_error_response(error: ApiError) -> JsonResponse:
    """An ApiError answered outside a DRF view, by middleware that runs before CommonMiddleware
    (which sets Content-Length on the other answers): scrapejobs/middleware.py."""
    response = JsonResponse(
        error_body(type=error.type, code=error.code, detail=str(error.detail)), status=error.status_code
    )
    response["Content-Length"] = str(len(response.content))
    return response


def _flatten(detail: Any) -> list[str]:
    if isinstance(detail, dict):
        return [f"{k}: {m}" for k, v in detail.items() for m in _flatten(v)]
    if isinstance(detail, list):
        return [m for item in detail for m in _flatten(item)]
    return [str(detail)]


def _validation_fields(detail: Any) -> dict[str, list[str]]:
    """DRF's nested error detail → {field: [messages]}; nested fields are flattened
    (``headers: {"Host": [...]}`` becomes ``{"headers": ["Host: ..."]}``)."""
    if not isinstance(detail, dict):
        return {"non_field_errors": _flatten(detail)}
    return {str(name): _flatten(messages) for name, messages in detail.items()}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """REST_FRAMEWORK["EXCEPTION_HANDLER"]: DRF's handler (it sets WWW-Authenticate and
    Retry-After and rolls back), then our body. Unexpected exceptions become a JSON 500."""
    if isinstance(exc, RequestDataTooBig):
        # Django's own bound (DATA_UPLOAD_MAX_MEMORY_SIZE, equal to SCRAPEJOBS_MAX_REQUEST_BYTES),
        # raised by request.body, which DRF reads before it calls a JSON parser. The body-limit
        # middleware refuses such a body first; this keeps any path it misses from a 500.
        exc = payload_too_large()
    response = drf_exception_handler(exc, context)
    if response is None:
        logger.exception("unhandled error in %s", context.get("view").__class__.__name__, exc_info=exc)
        set_rollback()
        body = error_body(type="server_error", code="internal_error", detail="Internal server error.")
        return Response(body, status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    if isinstance(exc, ApiError):
        response.data = error_body(type=exc.type, code=exc.code, detail=str(exc.detail))
    elif isinstance(exc, exceptions.ValidationError):
        fields = _validation_fields(exc.detail)
        response.data = error_body(
            type="validation_error", code="invalid", detail="The request is invalid.", fields=fields
        )
    else:
        assert isinstance(exc, exceptions.APIException)
        kind, code = next(
            (v for k, v in _DRF_TYPES.items() if isinstance(exc, k)),
            ("invalid_request", None),
        )
        response.data = error_body(type=kind, code=code or str(exc.default_code), detail=str(exc.detail))
    return response


# --- Django's own error views, for URLs no API view answered -----------------------------


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PATH_PREFIX)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler404: JSON under /api/, Django's page elsewhere."""
    if _is_api(request):
        return JsonResponse(
            error_body(type="not_found", code="not_found", detail="No such resource."), status=404
        )
    return defaults.page_not_found(request, exception)  # type: ignore[arg-type]


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: JSON under /api/, Django's page elsewhere."""
    if _is_api(request):
        return JsonResponse(
            error_body(type="server_error", code="internal_error", detail="Internal server error."),
            status=500,
        )
    return defaults.server_error(request)
