"""The ledger's side of erasure (FR-52, docs/erasure.md): which objects an erased job leaves in
storage, which of them another job still refers to, and the tombstone.

The storage is never called from here (apps.erasure does that, outside any transaction, before
the tombstone is written): a job is made a tombstone only after its objects are gone, so a
failed delete leaves the job as it was and the erasure can be asked again.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from apps.jobs.models import JobStatus
from apps.redis_clients import READ_CACHE_GONE_VERSION, job_read_cache_forget

# The statuses a job may be erased from: final, and not a tombstone already. (JobStatus.ERASED is
# final too; erasing a tombstone again changes nothing.)
ERASABLE = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True)
class ErasureTarget:
    """What a job to erase holds in storage: its attempts' bodies (each attempt number), its
    result's key (its own, or the job's it was served from), and its fetch key (every job that may
    share one of its objects has the same one)."""

    id: uuid.UUID
    tenant_id: uuid.UUID
    status: str
    attempts: int
    result_key: str | None
    fetch_key: str | None


def erasure_targets(
    *, job_ids: Sequence[uuid.UUID], tenant_id: uuid.UUID | None = None
) -> list[ErasureTarget]:
    """The jobs of ``job_ids`` (the tenant's, when given) with what erasing them must remove; every
    status, so the caller tells a running job (409) and a tombstone (nothing to do) apart."""
    if not job_ids:
        return []
    sql = "SELECT id, tenant_id, status, attempts, result_key, fetch_key FROM jobs_job WHERE id = ANY(%s::uuid[])"
    params: list[Any] = [list(job_ids)]
    if tenant_id is not None:
        sql += " AND tenant_id = %s"
        params.append(tenant_id)
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return [ErasureTarget(*row) for row in cur.fetchall()]


def result_keys_shared(*, fetch_key: str, keys: Sequence[str], besides: Sequence[uuid.UUID]) -> set[str]:
    """Of ``keys``, those another job's ``result_key`` names (besides the jobs in ``besides``): a
    body single-flight served to another job, or a 304 kept for a later one (FR-33). Every such
    job has the same fetch key, so the lookup is a range of jobs_by_fetch_key."""
    if not keys:
        return set()
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT DISTINCT result_key FROM jobs_job
             WHERE fetch_key = %s AND result_key = ANY(%s::text[])
               AND NOT (id = ANY(%s::uuid[]))
            """,
            [fetch_key, list(keys), list(besides)],
        )
        return {row[0] for row in cur.fetchall()}


# The tombstone: id, tenant, timestamps, counts, priority, method, rendering and the batch's row
# stay; the request (url blanked to '': the column is NOT NULL, and a tombstone is no reason to
# rewrite the hot table's schema), what was kept of the answer, the idempotency key and the
# fetch key (both derived from the request) go. Checked again here: only a final job becomes one.
_TOMBSTONE_SQL = """
WITH erased AS (
    UPDATE jobs_job
       SET status = 'erased', url = '', headers = '{}'::jsonb, body = NULL, domain = '',
           callback_url = NULL, callback_on = NULL, browser_options = NULL, trace_context = NULL,
           idempotency_key = NULL, idempotency_fingerprint = NULL, last_error = NULL,
           fetch_key = NULL, fetch_parked_at = NULL, defer_reason = NULL, deferred_until = NULL,
           result_key = NULL, result_size = NULL, result_sha256 = NULL, result_content_type = NULL,
           result_http_status = NULL, result_final_url = NULL, result_headers = NULL,
           result_stored_at = NULL, result_deleted_at = NULL,
           final_published_at = COALESCE(final_published_at, now()),
           updated_at = now(), version = version + 1
     WHERE id = ANY(%s::uuid[]) AND status IN ('succeeded', 'failed', 'cancelled')
 RETURNING id, version
), attempts AS (
    UPDATE jobs_attempt AS a
       SET error = NULL, finished_at = COALESCE(a.finished_at, now())
      FROM erased
     WHERE a.job_id = erased.id
)
SELECT id::text, version FROM erased
"""


def jobs_tombstone(*, job_ids: Sequence[uuid.UUID]) -> list[str]:
    """Make these final jobs tombstones (status ``erased``); returns the ids made so. Their
    read-cache copies go once this commits, replaced by the mark no version passes (as a pruned
    job's), so no reader that read a row before can store it again."""
    if not job_ids:
        return []
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_TOMBSTONE_SQL, [list(job_ids)])
        erased = [row[0] for row in cur.fetchall()]
        gone = {job_id: READ_CACHE_GONE_VERSION for job_id in erased}
        transaction.on_commit(lambda: job_read_cache_forget(gone))
    return erased


def batch_jobs_after(*, batch_id: uuid.UUID, after_row: int, limit: int) -> list[tuple[uuid.UUID, int]]:
    """(id, batch_row) of up to ``limit`` jobs of the batch past ``after_row``, in row order
    (jobs_unique_batch_row): a batch's erasure walks it in chunks (apps/erasure/batches.py)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT id, batch_row FROM jobs_job WHERE batch_id = %s AND batch_row > %s ORDER BY batch_row LIMIT %s",
            [batch_id, after_row, limit],
        )
        return [(row[0], row[1]) for row in cur.fetchall()]


def batch_has_unfinished_jobs(*, batch_id: uuid.UUID) -> bool:
    """Whether a job of the batch is queued or running (jobs_unique_batch_row)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT EXISTS (SELECT 1 FROM jobs_job WHERE batch_id = %s AND status IN ('queued', 'running'))",
            [batch_id],
        )
        return bool(cur.fetchone()[0])
