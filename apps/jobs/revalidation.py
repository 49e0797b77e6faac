"""Re-fetching (FR-33, FR-34, docs/revalidation.md): the tenant's previous success of a fetch key,
which a job that asked (``revalidate`` or ``callback_on``) is compared with, and whose validators
(``ETag``, ``Last-Modified``) a revalidating job sends back to the target.

Only jobs that asked read it (one statement, under the attempt's lease, before the fetch): a plain
job pays nothing. The read goes through jobs_by_fetch_key (fetch_key, finished_at), which every
success enters already (apps/jobs/models.py): revalidation adds no index entry to any job.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.db import connection


@dataclass(frozen=True)
class PreviousSuccess:
    """What a job is compared with, and served on a 304: the previous success's stored body."""

    job_id: str
    result_key: str
    size: int
    sha256: str
    content_type: str | None
    http_status: int
    stored_at: datetime
    final_url: str | None
    headers: dict[str, str]
    # Retention (or an erasure) removed the body: compared with by its SHA-256 still, never
    # served on a 304, so no condition is sent for it.
    body_deleted: bool = False

    def validators(self) -> dict[str, str]:
        """The conditional request headers this body allows (RFC 9110 13.1): ``If-None-Match``
        with the ETag exactly as the target sent it (a weak ``W/"…"`` one included: the
        comparison for If-None-Match is the weak one), ``If-Modified-Since`` with the
        Last-Modified date as sent. Empty when the target sent neither."""
        sent: dict[str, str] = {}
        etag = self.headers.get("etag")
        if etag:
            sent["If-None-Match"] = etag
        modified = self.headers.get("last-modified")
        if modified:
            sent["If-Modified-Since"] = modified
        return sent


def job_previous_success(
    *, fetch_key: str, tenant_id: uuid.UUID | str, job_id: uuid.UUID | str
) -> PreviousSuccess | None:
    """The tenant's latest success of ``fetch_key`` other than ``job_id``, or None; whether its
    body was removed since (``body_deleted``: retention sets ``result_deleted_at``). The tenant's
    own jobs only: with fetch sharing on, another tenant's success of the shared key is not this
    tenant's history."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT id::text, result_key, result_size, result_sha256, result_content_type,
                   result_http_status, result_stored_at, result_final_url, result_headers::text,
                   result_deleted_at IS NOT NULL
              FROM jobs_job
             WHERE fetch_key = %s AND status = 'succeeded' AND tenant_id = %s AND id <> %s
               AND result_key IS NOT NULL
             ORDER BY finished_at DESC
             LIMIT 1
            """,
            [fetch_key, str(tenant_id), str(job_id)],
        )
        row: Any = cur.fetchone()
    if row is None:
        return None
    job, key, size, sha256, content_type, status, stored_at, final_url, headers, deleted = row
    return PreviousSuccess(
        job_id=job,
        result_key=key,
        size=size,
        sha256=sha256,
        content_type=content_type,
        http_status=status,
        stored_at=stored_at,
        final_url=final_url,
        headers=orjson.loads(headers) if headers else {},
        body_deleted=deleted,
    )
