"""The ledger's side of retention: which stored bodies are due for deletion,
marking them deleted once the storage has deleted them, and pruning old final jobs.

The storage is never called from here (apps.results.storage_retention does that, outside any
transaction); these statements only pick rows and record what was done. A body is marked only
after its delete succeeded, so a crash between the two repeats a delete (a no-op on a missing
object) and never forgets one; a marked body is never picked again.

Which attempts can leave a body that is not their job's result: a body is stored only after a
fetch succeeded, and a succeeded receipt that is applied always makes the job succeed with that
body (success is final). So an orphan comes from an attempt whose receipt never moved the job:
one ``lost`` with its worker (the sweeper closed it; the worker may have stored the body before
it died or while its late receipt was fenced off), or one that failed while or after storing
(``storage_error``: an upload given up at its deadline may still land; ``internal_error``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from django.db import connection, transaction

from apps.jobs.models import FINAL_STATUSES, Job
from apps.redis_clients import READ_CACHE_GONE_VERSION, job_read_cache_forget

# The attempts that may have left an orphan body; the same predicate as the partial index
# attempts_orphan_body (apps/jobs/models.py), so the planner can use it.
_ORPHAN_PREDICATE = "a.body_deleted_at IS NULL AND (a.outcome = 'lost' OR a.error_class IN ('storage_error', 'internal_error'))"

_RESULTS_DUE_SQL = """
SELECT id, result_key
  FROM jobs_job
 WHERE result_key IS NOT NULL AND result_deleted_at IS NULL AND result_stored_at < %s
 ORDER BY result_stored_at
 LIMIT %s
"""

# The job and its result attempt (the job's last attempt: success is final) are marked together.
_RESULTS_MARK_SQL = """
WITH marked AS (
    UPDATE jobs_job
       SET result_deleted_at = now(), version = version + 1
     WHERE id = ANY(%s) AND result_deleted_at IS NULL
 RETURNING id, attempts, version
), attempts AS (
    UPDATE jobs_attempt AS a
       SET body_deleted_at = now()
      FROM marked
     WHERE a.job_id = marked.id AND a.number = marked.attempts AND a.body_deleted_at IS NULL
)
SELECT id::text, version FROM marked
"""

_ORPHANS_DUE_SQL = f"""
SELECT a.id, a.job_id, a.number
  FROM jobs_attempt AS a
 WHERE {_ORPHAN_PREDICATE} AND a.finished_at < %s
 ORDER BY a.finished_at
 LIMIT %s
"""

_ORPHANS_MARK_SQL = (
    "UPDATE jobs_attempt SET body_deleted_at = now() WHERE id = ANY(%s) AND body_deleted_at IS NULL"
)

# Final jobs that ended before the cutoff with nothing left in storage: no live result and no
# orphan body still to delete (so pruning a row never orphans its objects).
_PRUNE_DUE_SQL = f"""
SELECT j.id
  FROM jobs_job AS j
 WHERE j.status IN ('succeeded', 'failed', 'cancelled') AND j.finished_at < %s
   AND (j.result_key IS NULL OR j.result_deleted_at IS NOT NULL)
   AND NOT EXISTS (SELECT 1 FROM jobs_attempt AS a WHERE a.job_id = j.id AND {_ORPHAN_PREDICATE})
 ORDER BY j.finished_at, j.id
 LIMIT %s
"""


def results_due_for_expiry(*, stored_before: datetime, limit: int) -> list[tuple[uuid.UUID, str]]:
    """(job id, result key) of up to ``limit`` results stored before the cutoff and not yet
    deleted, oldest first (index jobs_result_unexpired)."""
    with connection.cursor() as cur:
        cur.execute(_RESULTS_DUE_SQL, [stored_before, limit])
        return [(row[0], row[1]) for row in cur.fetchall()]


def results_mark_expired(*, job_ids: Sequence[uuid.UUID]) -> int:
    """Record that these jobs' results were deleted from storage; returns the jobs marked."""
    if not job_ids:
        return 0
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_RESULTS_MARK_SQL, [list(job_ids)])
        versions = dict(cur.fetchall())
        # GET /jobs/{id} shows result_expired: the read cache's copies go once this commits, and a
        # reader that read the row before cannot store it again (apps/query/cache.py).
        transaction.on_commit(lambda: job_read_cache_forget(versions))
        return len(versions)


def orphan_bodies_due(*, finished_before: datetime, limit: int) -> list[tuple[int, uuid.UUID, int]]:
    """(attempt id, job id, attempt number) of up to ``limit`` attempts that ended before the
    cutoff and may have left a body that is not a result (index attempts_orphan_body)."""
    with connection.cursor() as cur:
        cur.execute(_ORPHANS_DUE_SQL, [finished_before, limit])
        return [(row[0], row[1], row[2]) for row in cur.fetchall()]


def orphan_bodies_mark_deleted(*, attempt_ids: Sequence[int]) -> int:
    """Record that these attempts' bodies were deleted from storage."""
    if not attempt_ids:
        return 0
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_ORPHANS_MARK_SQL, [list(attempt_ids)])
        return cur.rowcount


def jobs_prune(*, finished_before: datetime, limit: int) -> int:
    """Delete up to ``limit`` final jobs that ended before the cutoff and have nothing left in
    storage, with their attempts and what else hangs off them (the ORM's cascade: webhook
    deliveries); returns the jobs deleted. Index jobs_final_by_finished."""
    with connection.cursor() as cur:
        cur.execute(_PRUNE_DUE_SQL, [finished_before, limit])
        ids = [row[0] for row in cur.fetchall()]
    if not ids:
        return 0
    with transaction.atomic():
        # Checked again in the delete: a requeued dead letter is no longer final.
        _, by_model = Job.objects.filter(
            id__in=ids, status__in=FINAL_STATUSES, finished_at__lt=finished_before
        ).delete()
        # A pruned job is 404 everywhere: its read-cache copy goes too, and no reader that read it
        # before the delete can store it again (a mark no version passes).
        gone = {str(i): READ_CACHE_GONE_VERSION for i in ids}
        transaction.on_commit(lambda: job_read_cache_forget(gone))
    return by_model.get(Job._meta.label, 0)
