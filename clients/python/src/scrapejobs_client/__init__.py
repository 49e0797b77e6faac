"""Python client for the scrapejobs API (docs/client.md in the service's repository).

from scrapejobs_client import Client
with Client("http://127.0.0.1:8000", "sj_…") as sj:
    job = sj.wait(sj.submit("https://example.com/"), timeout=60)
    body = sj.result_bytes(job)
"""

from scrapejobs_client._core import FINAL_STATUSES
from scrapejobs_client._models import (
    Attempt,
    Batch,
    BatchCancelled,
    Crawl,
    CrawlDiscovery,
    CrawlPage,
    CrawlPageCounts,
    DisabledCallback,
    Job,
    JobCancelled,
    JobCancelRequested,
    JobCreated,
    LastError,
    Result,
    Token,
    TokenCreated,
    WebhookDelivery,
    WebhookSecret,
    WebhookSecretRotated,
    WebhookSecrets,
)
from scrapejobs_client.aio import AsyncClient
from scrapejobs_client.client import Client, TransportFailed
from scrapejobs_client.errors import (
    ApiError,
    AuthenticationFailed,
    BadRequest,
    BatchFailed,
    Conflict,
    Gone,
    IdempotencyMismatch,
    IntegrityError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    RowsRejected,
    ScrapejobsError,
    ServerError,
    ServiceUnavailable,
    UnsupportedMediaType,
    WaitTimeout,
)
from scrapejobs_client.webhooks import WebhookVerificationError, verify

__version__ = "0.1.0"

__all__ = [
    "FINAL_STATUSES",
    "ApiError",
    "AsyncClient",
    "Attempt",
    "AuthenticationFailed",
    "BadRequest",
    "Batch",
    "BatchCancelled",
    "BatchFailed",
    "Client",
    "Conflict",
    "Crawl",
    "CrawlDiscovery",
    "CrawlPage",
    "CrawlPageCounts",
    "DisabledCallback",
    "Gone",
    "IdempotencyMismatch",
    "IntegrityError",
    "InvalidRequest",
    "Job",
    "JobCancelRequested",
    "JobCancelled",
    "JobCreated",
    "LastError",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "Result",
    "RowsRejected",
    "ScrapejobsError",
    "ServerError",
    "ServiceUnavailable",
    "Token",
    "TokenCreated",
    "TransportFailed",
    "UnsupportedMediaType",
    "WaitTimeout",
    "WebhookDelivery",
    "WebhookSecret",
    "WebhookSecretRotated",
    "WebhookSecrets",
    "WebhookVerificationError",
    "verify",
]
