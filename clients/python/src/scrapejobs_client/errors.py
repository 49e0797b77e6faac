"""Typed exceptions. Every error answer of the API becomes an ``ApiError`` subclass carrying the
API's ``type``, ``code``, ``detail`` and, for validation errors, ``fields`` (field name -> messages)."""

from __future__ import annotations

from typing import Any


class ScrapejobsError(Exception):
    """The root of this package's exceptions."""


class InvalidRequest(ScrapejobsError, ValueError):
    """Refused before sending: the request breaks a constraint the API's OpenAPI document states."""

    def __init__(self, fields: dict[str, list[str]]):
        self.fields = fields
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in fields.items()))


class ApiError(ScrapejobsError):
    status_code: int
    type: str
    code: str
    detail: str
    fields: dict[str, Any]

    def __init__(
        self,
        *,
        status_code: int,
        type: str = "",
        code: str = "",
        detail: str = "",
        fields: dict[str, Any] | None = None,
        retry_after_s: float | None = None,
    ):
        self.status_code, self.type, self.code, self.detail = status_code, type, code, detail
        self.fields = fields or {}
        self.retry_after_s = retry_after_s
        super().__init__(
            f"{status_code} {code or type}: {detail}" + (f" {self.fields}" if self.fields else "")
        )


class BadRequest(ApiError):
    """400: the request was refused and nothing was created."""


class AuthenticationFailed(ApiError):
    """401 or 403: a missing, revoked or unknown token."""


class NotFound(ApiError):
    """404: no such job or batch for this tenant (another tenant's look the same)."""


class Conflict(ApiError):
    """409: e.g. a result asked of a job that has not succeeded, a cancel of a final job."""


class Gone(ApiError):
    """410: the result was removed by retention."""


class PayloadTooLarge(ApiError):
    """413."""


class UnsupportedMediaType(ApiError):
    """415."""


class IdempotencyMismatch(ApiError):
    """422: the Idempotency-Key was used with another body."""


class RateLimited(ApiError):
    """429, still there after the client's retries."""


class ServiceUnavailable(ApiError):
    """503, still there after the client's retries."""


class ServerError(ApiError):
    """Another 5xx."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: AuthenticationFailed,
    403: AuthenticationFailed,
    404: NotFound,
    409: Conflict,
    410: Gone,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    422: IdempotencyMismatch,
    429: RateLimited,
    503: ServiceUnavailable,
}


def error_for(status_code: int, body: Any, retry_after_s: float | None = None) -> ApiError:
    cls = _BY_STATUS.get(status_code, ServerError if status_code >= 500 else ApiError)
    data = body if isinstance(body, dict) else {}
    return cls(
        status_code=status_code,
        type=str(data.get("type", "")),
        code=str(data.get("code", "")),
        detail=str(data.get("detail", "") or (body if isinstance(body, str) else "")),
        fields=data.get("fields") if isinstance(data.get("fields"), dict) else None,
        retry_after_s=retry_after_s,
    )


class WaitTimeout(ScrapejobsError, TimeoutError):
    """``wait`` ran out of time before the job was final; ``job`` is its last state."""

    def __init__(self, job: Any):
        self.job = job
        super().__init__(f"job {job.id} still {job.status}")


class IntegrityError(ScrapejobsError):
    """A downloaded result's SHA-256 or size is not what the API recorded."""


class RowsRejected(ScrapejobsError):
    """``submit_many``: some rows were refused. ``ids`` holds the jobs of the others, in row order
    (None for a rejected row), ``rejected`` the rows with their reasons."""

    def __init__(self, ids: list[str | None], rejected: list[Any]):
        self.ids, self.rejected = ids, rejected
        super().__init__(f"{len(rejected)} row(s) rejected, first: {rejected[:3]}")


class BatchFailed(ScrapejobsError):
    """A batch could not be loaded (its status is ``failed``)."""

    def __init__(self, batch: Any):
        self.batch = batch
        super().__init__(f"batch {batch.id} failed: {batch.error}")
