"""Generated from the service's OpenAPI document by clients/python/tools/generate_models.py;
do not edit (a test fails when this module and the document disagree)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from scrapejobs_client._base import Model

JOB_STATUSES = ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'erased')
PRIORITIES = ('high', 'normal', 'low')
METHODS = ('GET', 'HEAD', 'POST')
BATCH_STATUSES = ('receiving', 'accepted', 'loading', 'loaded', 'failed')
TOKEN_SCOPES = ('admin', 'full', 'read')
CRAWL_STATUSES = ('running', 'completed', 'cancelled')
CRAWL_SCOPES = ('same_origin', 'same_site', 'prefix')


@dataclass(frozen=True)
class LastError(Model):
    message: str | None
    http_status: int | None
    class_: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {"class_": "class"}


@dataclass(frozen=True)
class JobLinks(Model):
    self: str
    result: str
    attempts: str
    cancel: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class CreatedLinks(Model):
    self: str
    result: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class BatchLinks(Model):
    self: str
    jobs: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class ServedFrom(Model):
    job_id: str | None
    attempt: int | None
    other_tenant: bool
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class RejectedRow(Model):
    row: int
    errors: dict[str, Any]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class Job(Model):
    id: str
    url: str
    method: str
    status: str
    priority: str
    render: str
    attempts: int
    max_attempts: int
    last_error: LastError | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    result_expired: bool
    waiting_for: str | None
    waiting_until: str | None
    final_url: str | None
    batch: str | None
    batch_row: int | None
    changed: bool | None
    previous_job: str | None
    links: JobLinks
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {"last_error": "LastError", "links": "JobLinks"}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class JobCreated(Model):
    id: str
    status: str
    links: CreatedLinks
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {"links": "CreatedLinks"}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class Attempt(Model):
    number: int
    started_at: str
    finished_at: str | None
    outcome: str | None
    http_status: int | None
    error_class: str | None
    error: str | None
    duration_ms: int | None
    subrequests: Any | None
    served_from: ServedFrom | None
    revalidated_from: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {"served_from": "ServedFrom"}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class Result(Model):
    url: str
    expires_at: str
    size: int
    sha256: str
    content_type: str | None
    http_status: int
    screenshot: Any | None
    headers: dict[str, Any]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class Batch(Model):
    id: str
    status: str
    total: int
    accepted: int
    rejected: int
    loaded: int
    progress: float
    rejected_rows: list[RejectedRow]
    error: str | None
    created_at: str
    finished_at: str | None
    links: BatchLinks
    erasure: Any | None
    jobs: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {"rejected_rows": "RejectedRow", "links": "BatchLinks"}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class JobCancelled(Model):
    id: str
    status: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class JobCancelRequested(Model):
    id: str
    status: str
    cancel_requested: bool
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class BatchCancelled(Model):
    id: str
    cancelled: int
    cancel_requested: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class ErrorBody(Model):
    type: str
    code: str
    detail: str
    fields: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class Token(Model):
    id: int
    name: str
    scope: str
    prefix: str
    created_at: str
    expires_at: str | None
    last_used_at: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class TokenCreated(Model):
    id: int
    name: str
    scope: str
    prefix: str
    created_at: str
    expires_at: str | None
    last_used_at: str | None
    token: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class WebhookSecret(Model):
    created_at: str | None
    expires_at: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class WebhookSecrets(Model):
    current: WebhookSecret
    previous: WebhookSecret | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {"current": "WebhookSecret", "previous": "WebhookSecret"}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class WebhookSecretRotated(Model):
    secret: str
    created_at: str
    previous_expires_at: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class WebhookDelivery(Model):
    id: int
    event: str
    job: str | None
    batch: str | None
    url: str
    status: str
    attempts: int
    last_status_code: int | None
    last_attempt_at: str | None
    last_error: str | None
    next_attempt_at: str | None
    created_at: str
    delivered_at: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class DisabledCallback(Model):
    id: int
    url: str
    disabled_at: str
    delivery: int | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class UsageAttempts(Model):
    succeeded: int
    failed_temporary: int
    failed_permanent: int
    cancelled: int
    lost: int
    deferred: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class UsageTotals(Model):
    jobs_submitted: int
    attempts: UsageAttempts
    bytes_stored: int
    rendered_pages: int
    batches: int
    crawls: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {"attempts": "UsageAttempts"}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class UsageDay(Model):
    jobs_submitted: int
    attempts: UsageAttempts
    bytes_stored: int
    rendered_pages: int
    batches: int
    crawls: int
    date: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {"attempts": "UsageAttempts"}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class Usage(Model):
    from_: str
    to: str
    days: list[UsageDay]
    totals: UsageTotals
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {"days": "UsageDay", "totals": "UsageTotals"}
    _wire: ClassVar[dict[str, str]] = {"from_": "from"}


@dataclass(frozen=True)
class CrawlLinks(Model):
    self: str
    pages: str
    jobs: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class CrawlPageCounts(Model):
    total: int
    queued: int
    running: int
    succeeded: int
    failed: int
    cancelled: int
    erased: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class CrawlDiscovery(Model):
    discovered: int
    duplicate: int
    out_of_scope: int
    over_limit: int
    disallowed: int
    out_of_scope_redirect: int
    sitemaps: int
    nofollow: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class Crawl(Model):
    id: str
    status: str
    seeds: list[Any]
    scope: str
    include: list[Any]
    exclude: list[Any]
    max_pages: int
    max_depth: int
    sitemaps: str
    job: dict[str, Any]
    callback_url: str | None
    created_at: str
    finished_at: str | None
    links: CrawlLinks
    pages: CrawlPageCounts | None = None
    discovery: CrawlDiscovery | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {"links": "CrawlLinks", "pages": "CrawlPageCounts", "discovery": "CrawlDiscovery"}
    _wire: ClassVar[dict[str, str]] = {}


@dataclass(frozen=True)
class CrawlPage(Model):
    seq: int
    url: str
    depth: int
    kind: str
    found_on: int | None
    job: str
    status: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}


# POST /jobs's fields and the constraints the API enforces on them.
JOB_FIELDS: dict[str, dict[str, Any]] = {
    "body": {
        "nullable": True,
        "pattern": "^[^\\u0000]*$",
        "type": "string"
    },
    "browser": {
        "type": "object"
    },
    "callback_on": {
        "enum": [
            "final",
            "change"
        ],
        "type": "string"
    },
    "callback_url": {
        "maxLength": 8192,
        "minLength": 1,
        "nullable": True,
        "pattern": "^[hH][tT][tT][pP][sS]?://(?!(?:[A-Za-z0-9-]+\\.)*[lL][oO][cC][aA][lL][hH][oO][sS][tT](?:[:/?#]|$))((?:[A-Za-z0-9-]{1,63}\\.)*[A-Za-z][A-Za-z0-9-]{0,62})(?::[0-9]{1,4})?(?:[/?#][!-~]*)?$",
        "type": "string"
    },
    "headers": {
        "maxProperties": 50,
        "names": {
            "maxLength": 256,
            "not": {
                "enum": [
                    "connection",
                    "content-length",
                    "host",
                    "keep-alive",
                    "proxy-authenticate",
                    "proxy-authorization",
                    "proxy-connection",
                    "te",
                    "trailer",
                    "transfer-encoding",
                    "upgrade"
                ]
            },
            "pattern": "^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$"
        },
        "type": "object",
        "values": {
            "maxLength": 8192,
            "pattern": "^[^\\r\\n\\u0000]*$"
        }
    },
    "max_age_s": {
        "maximum": 2592000,
        "minimum": 0,
        "type": "integer"
    },
    "max_attempts": {
        "maximum": 20,
        "minimum": 1,
        "type": "integer"
    },
    "method": {
        "enum": [
            "GET",
            "HEAD",
            "POST"
        ],
        "type": "string"
    },
    "priority": {
        "enum": [
            "high",
            "normal",
            "low"
        ],
        "type": "string"
    },
    "render": {
        "enum": [
            "none",
            "browser"
        ],
        "type": "string"
    },
    "revalidate": {
        "type": "boolean"
    },
    "timeout_s": {
        "maximum": 300,
        "minimum": 1,
        "type": "integer"
    },
    "url": {
        "maxLength": 8192,
        "minLength": 1,
        "pattern": "^[hH][tT][tT][pP][sS]?://(?!(?:[A-Za-z0-9-]+\\.)*[lL][oO][cC][aA][lL][hH][oO][sS][tT](?:[:/?#]|$))((?:[A-Za-z0-9-]{1,63}\\.)*[A-Za-z][A-Za-z0-9-]{0,62})(?::[0-9]{1,4})?(?:[/?#][!-~]*)?$",
        "type": "string"
    }
}
JOB_REQUIRED: tuple[str, ...] = ('url',)
# POST /crawls's fields (crawl() refuses any other before sending).
CRAWL_FIELDS: tuple[str, ...] = ('seeds', 'max_pages', 'max_depth', 'scope', 'sitemaps', 'include', 'exclude', 'job', 'callback_url')
