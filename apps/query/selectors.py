"""Reads for the query endpoints. Every read is scoped by tenant: another tenant's job does not
exist (apps.api.selectors holds the reads intake makes too).

``job_wait_final`` is the single-flight waiting of contract section 6 seen from a caller: it
LISTENs before it reads, so a job that becomes final between the read and the wait still wakes
it, and it re-reads on a timer in case a notification is lost (a NOTIFY is not durable).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg
from django.db import connections
from django.db.models import QuerySet
from psycopg import sql

from apps.api.selectors import parse_job_id
from apps.jobs.final_notices import JOB_FINAL_CHANNEL
from apps.jobs.models import Attempt, Job
from apps.jobs.selectors import JOB_WAITING_COLUMNS

# The columns a job's API representation needs; the request headers and body stay in the row.
JOB_COLUMNS = (
    "id",
    "url",
    "method",
    "status",
    "priority",
    "attempts",
    "max_attempts",
    "last_error",
    "created_at",
    "started_at",
    "finished_at",
    "result_deleted_at",  # result_expired (retention, issue 13 item 6)
) + JOB_WAITING_COLUMNS
# Result columns, for GET /jobs/{id}/result.
RESULT_COLUMNS = (
    "result_key",
    "result_size",
    "result_sha256",
    "result_content_type",
    "result_http_status",
    "result_stored_at",
)
# How often a waiting caller re-reads its job when no notification came (a lost NOTIFY, or a
# listener connection that missed it) — the worst-case extra delay of ?wait.
WAIT_RECHECK_S = 1.0


def job_get(*, tenant_id: uuid.UUID, job_id: uuid.UUID | str, with_result: bool = False) -> Job | None:
    """The tenant's job, or None (missing, malformed id, or another tenant's: all alike)."""
    parsed = parse_job_id(job_id)
    if parsed is None:
        return None
    columns = JOB_COLUMNS + RESULT_COLUMNS if with_result else JOB_COLUMNS
    return Job.objects.only(*columns).filter(id=parsed, tenant_id=tenant_id).first()


# --- List ---------------------------------------------------------------------------------


def job_list(
    *,
    tenant_id: uuid.UUID,
    status: str | None = None,
    priority: str | None = None,
    batch_id: uuid.UUID | None = None,
    before: uuid.UUID | None = None,
    limit: int = 50,
) -> tuple[list[Job], uuid.UUID | None]:
    """One page of the tenant's jobs, newest first, and the id to continue below (or None).

    Ids are UUIDv7 (time-ordered, unique), so ``id < last`` continues exactly where the page
    ended: a job never shows twice or is skipped, and jobs created during the walk are newer than
    every cursor and so never appear in it. Served by the jobs_tenant_*_newest indexes.
    """
    qs = Job.objects.only(*JOB_COLUMNS).filter(tenant_id=tenant_id)
    if status is not None:
        qs = qs.filter(status=status)
    if priority is not None:
        qs = qs.filter(priority=priority)
    if batch_id is not None:
        qs = qs.filter(batch_id=batch_id)
    if before is not None:
        qs = qs.filter(id__lt=before)
    rows = list(qs.order_by("-id")[: limit + 1])
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1].id
    return rows, None


def attempt_list(*, job_id: uuid.UUID) -> QuerySet[Attempt]:
    return Attempt.objects.filter(job_id=job_id).order_by("number")


# --- ?wait= -------------------------------------------------------------------------------


def _listen_connection() -> psycopg.Connection[Any]:
    """A connection of its own for LISTEN: Django's request connection may be pooled or inside a
    transaction, and notifications are only delivered between transactions."""
    s = connections["default"].settings_dict
    params: dict[str, Any] = {
        "dbname": s["NAME"],
        "user": s.get("USER") or None,
        "password": s.get("PASSWORD") or None,
        "host": s.get("HOST") or None,
        "port": str(s["PORT"]) if s.get("PORT") else None,
        "connect_timeout": 5,
    }
    for key, value in (s.get("OPTIONS") or {}).items():
        # Only libpq connection parameters; Django's own options (pool, isolation_level...) stay.
        if key in (
            "host",
            "port",
            "sslmode",
            "sslrootcert",
            "sslcert",
            "sslkey",
            "application_name",
            "options",
        ):
            params[key] = value
    return psycopg.connect(autocommit=True, **{k: v for k, v in params.items() if v is not None})


def job_wait_final(*, tenant_id: uuid.UUID, job_id: uuid.UUID | str, timeout_s: float) -> Job | None:
    """The job once it is final, or as it is after ``timeout_s``; None if it is not the tenant's.

    Costs one extra connection for the length of the wait, and only when the job is not final at
    the first read.
    """
    job = job_get(tenant_id=tenant_id, job_id=job_id)
    if job is None or job.is_final or timeout_s <= 0:
        return job
    deadline = time.monotonic() + timeout_s
    wanted = str(job.id)
    with _listen_connection() as conn:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(JOB_FINAL_CHANNEL)))
        # Read again now that we listen: a change after this read is sure to be notified.
        job = job_get(tenant_id=tenant_id, job_id=job_id)
        while job is not None and not job.is_final:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for note in conn.notifies(timeout=min(left, WAIT_RECHECK_S)):
                if note.payload == wanted:
                    break
            job = job_get(tenant_id=tenant_id, job_id=job_id)
    return job
