"""Reads for the analytics export: finished jobs of a time window and their
attempts, a bounded page at a time.

The walk is a keyset on ``(finished_at, id)``, served by the ``jobs_final_by_finished`` index:
each page starts exactly after the previous one's last row, so a day of millions of jobs is read
in pages of constant cost and never held whole in memory. The request's headers and body stay
out (they may hold the target's credentials).

Times come out as integer microseconds since the Unix epoch (UTC), exact (``extract`` is numeric
since PostgreSQL 14): parsing them as text timestamps was two thirds of an export's time.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

# The columns of an exported job, in the order export_jobs_page returns them.
EXPORT_JOB_COLUMNS = (
    "id",
    "tenant_id",
    "method",
    "url",
    "domain",
    "priority",
    "status",
    "attempts",
    "max_attempts",
    "created_at",
    "started_at",
    "finished_at",
    "last_error_class",
    "last_error_message",
    "last_error_http_status",
    "result_key",
    "result_size",
    "result_sha256",
    "result_content_type",
    "result_http_status",
    "result_stored_at",
    "result_deleted_at",
)
# The columns of an exported attempt, in the order export_attempts_of returns them.
EXPORT_ATTEMPT_COLUMNS = (
    "job_id",
    "number",
    "worker",
    "started_at",
    "finished_at",
    "outcome",
    "http_status",
    "error_class",
    "error",
    "duration_ms",
)


def _us(column: str) -> str:
    return f"(extract(epoch FROM {column}) * 1000000)::bigint"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_JOBS_PAGE_SQL = f"""
SELECT id::text, tenant_id::text, method, url, domain, priority, status, attempts, max_attempts,
       {_us("created_at")}, {_us("started_at")}, {_us("finished_at")},
       last_error->>'class', last_error->>'message', (last_error->>'http_status')::int,
       result_key, result_size, result_sha256, result_content_type, result_http_status,
       {_us("result_stored_at")}, {_us("result_deleted_at")}
  FROM jobs_job
 WHERE status IN ('succeeded', 'failed', 'cancelled')
   AND finished_at >= %s AND finished_at < %s
   AND (finished_at, id) > (%s, %s)
 ORDER BY finished_at, id
 LIMIT %s
"""

_ATTEMPTS_SQL = f"""
SELECT job_id::text, number, worker, {_us("started_at")}, {_us("finished_at")}, outcome, http_status,
       error_class, error, duration_ms
  FROM jobs_attempt
 WHERE job_id = ANY(%s::uuid[])
 ORDER BY job_id, number
"""


def export_jobs_page(
    *, since: datetime, until: datetime, after: tuple[int, str] | None, limit: int
) -> list[tuple[Any, ...]]:
    """Up to ``limit`` final jobs with ``since <= finished_at < until``, in (finished_at, id)
    order, starting after ``after`` (the previous page's last finished_at in microseconds and
    id); the columns are EXPORT_JOB_COLUMNS."""
    start = (
        (since, uuid.UUID(int=0)) if after is None else (_EPOCH + timedelta(microseconds=after[0]), after[1])
    )
    with connection.cursor() as cur:
        cur.execute(_JOBS_PAGE_SQL, [since, until, start[0], start[1], limit])
        return cur.fetchall()


def export_attempts_of(*, job_ids: Sequence[str]) -> list[tuple[Any, ...]]:
    """Every attempt of these jobs, by job then number (the unique (job, number) index serves
    it); the columns are EXPORT_ATTEMPT_COLUMNS."""
    if not job_ids:
        return []
    with connection.cursor() as cur:
        cur.execute(_ATTEMPTS_SQL, [list(job_ids)])  # as text: cheaper to send than UUID objects
        return cur.fetchall()
