"""Cancel a job (the API and the admin) and requeue failed or cancelled ones (the admin, the dead
letters)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

import redis
from django.db import connection, transaction

from apps.jobs.final_notices import jobs_notify_final
from apps.jobs.models import JobStatus, counted_attempts_sql
from apps.jobs.singleflight import jobs_fetch_settle
from apps.redis_clients import cancel_flag_key, job_read_cache_forget, state_redis

# What a requeue takes by default: the final states that are not a success.
REQUEUABLE = (JobStatus.FAILED, JobStatus.CANCELLED)
# A cancel flag outlives any attempt it can stop; it names its attempt, so its length harms nothing.
CANCEL_FLAG_TTL_S = 24 * 3600

logger = logging.getLogger(__name__)


def job_cancel(*, job_id: uuid.UUID | str, tenant_id: uuid.UUID | None = None) -> str:
    """Cancel a job. Returns ``"cancelled"`` (it was queued and is now final),
    ``"cancel_requested"`` (it is running; its worker stops at its next check), or ``"final"``
    (nothing to cancel).

    One statement, so the answer always matches the job's next state. Two conditional UPDATEs
    (one for ``queued``, one for ``running``) each see the row as of their own start under READ
    COMMITTED: a retry folded in between (``running`` to ``queued``) made both miss, and a job
    that was going to run again was answered ``final`` (409). A single UPDATE
    waits for the writer's row lock and then re-reads the row's newest version, so it sees
    either ``running`` or ``queued``."""
    tenant_filter = "" if tenant_id is None else "AND tenant_id = %s"
    params = [uuid.UUID(str(job_id))] + ([] if tenant_id is None else [uuid.UUID(str(tenant_id))])
    with transaction.atomic(), connection.cursor() as cur:
        # In SET, `status` is the row's old value (every expression reads the old row).
        cur.execute(
            f"""
            UPDATE jobs_job
               SET status = CASE WHEN status = 'queued' THEN 'cancelled' ELSE status END,
                   finished_at = CASE WHEN status = 'queued' THEN now() ELSE finished_at END,
                   lease_owner = CASE WHEN status = 'queued' THEN NULL ELSE lease_owner END,
                   lease_expires_at = CASE WHEN status = 'queued' THEN NULL ELSE lease_expires_at END,
                   final_published_at = CASE WHEN status = 'queued' THEN NULL
                                             ELSE final_published_at END,
                   cancel_requested_at = now(),
                   updated_at = now(), version = version + 1
             WHERE id = %s {tenant_filter} AND status IN ('queued', 'running')
         RETURNING status, attempts
            """,
            params,
        )
        row = cur.fetchone()
        if row is None:
            return "final"
        status, attempt = row
        if status == JobStatus.CANCELLED:
            jobs_notify_final([str(job_id)])
            # Elected to fetch for others but not yet running: one of them fetches instead. (A
            # running elected job hands over when its cancelled attempt is folded.)
            jobs_fetch_settle([str(job_id)])
            return "cancelled"
    # Running: the worker's lease keeper polls this flag for all its held jobs in one round trip
    # (Redis, so the hot loop never queries SQL) and stops the fetch. The flag names the attempt
    # it stops, so a later attempt (after a requeue) never sees it and nothing has to clear it.
    # Without Redis the cancel still holds: the row says so, and the attempt's receipt (or the
    # sweeper) ends the job `cancelled` when the attempt ends.
    try:
        state_redis().set(cancel_flag_key(str(job_id), attempt), "1", ex=CANCEL_FLAG_TTL_S)
    except redis.RedisError:
        logger.warning("cancel of job %s: Redis did not take the flag; the attempt runs to its end", job_id)
    return "cancel_requested"


# Jobs of a batch cancelled per statement: short transactions however large the batch (FR-25).
BATCH_CANCEL_CHUNK = 5000


def jobs_cancel_batch(*, batch_id: uuid.UUID, tenant_id: uuid.UUID) -> tuple[int, int]:
    """Cancel every job of a batch as ``job_cancel`` cancels one (FR-25): queued ones at once,
    running ones by their cancel flag. Returns (cancelled, cancel_requested).

    Walks the batch by ``batch_row`` (the index jobs_unique_batch_row) in chunks, each one UPDATE
    in its own short transaction, so a batch of a million jobs never holds a million row locks."""
    cancelled = requested = 0
    after = 0
    while True:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(
                """
                WITH chunk AS (
                    SELECT id, batch_row FROM jobs_job
                     WHERE batch_id = %s AND tenant_id = %s AND batch_row > %s
                     ORDER BY batch_row
                     LIMIT %s
                ), changed AS (
                    UPDATE jobs_job AS j
                       SET status = CASE WHEN j.status = 'queued' THEN 'cancelled' ELSE j.status END,
                           finished_at = CASE WHEN j.status = 'queued' THEN now() ELSE j.finished_at END,
                           lease_owner = CASE WHEN j.status = 'queued' THEN NULL ELSE j.lease_owner END,
                           lease_expires_at = CASE WHEN j.status = 'queued' THEN NULL
                                                   ELSE j.lease_expires_at END,
                           final_published_at = CASE WHEN j.status = 'queued' THEN NULL
                                                     ELSE j.final_published_at END,
                           cancel_requested_at = now(),
                           updated_at = now(), version = j.version + 1
                      FROM chunk
                     WHERE j.id = chunk.id AND j.status IN ('queued', 'running')
                 RETURNING j.id, j.status, j.attempts
                )
                SELECT (SELECT max(batch_row) FROM chunk), id, status, attempts FROM changed
                UNION ALL
                SELECT (SELECT max(batch_row) FROM chunk), NULL, NULL, NULL
                """,
                [batch_id, tenant_id, after, BATCH_CANCEL_CHUNK],
            )
            rows = cur.fetchall()
            last = rows[-1][0]
            done = [str(job_id) for _, job_id, status, _ in rows if status == JobStatus.CANCELLED]
            running = [
                (str(job_id), attempt) for _, job_id, status, attempt in rows if status == JobStatus.RUNNING
            ]
            if done:
                jobs_notify_final(done)
                jobs_fetch_settle(done)
        cancelled += len(done)
        requested += len(running)
        if running:
            try:
                pipe = state_redis().pipeline(transaction=False)
                for job_id, attempt in running:
                    pipe.set(cancel_flag_key(job_id, attempt), "1", ex=CANCEL_FLAG_TTL_S)
                pipe.execute()
            except redis.RedisError:
                logger.warning("cancel of batch %s: Redis did not take %d flags", batch_id, len(running))
        if last is None:
            return cancelled, requested
        after = last


def jobs_requeue(*, job_ids: Iterable[uuid.UUID | str], statuses: Iterable[str] = REQUEUABLE) -> int:
    """Give failed or cancelled jobs (those of ``job_ids`` in one of ``statuses``) a fresh attempt
    budget; their history stays. Returns how many were requeued.

    The attempt budget restarts by raising ``max_attempts`` above the attempts already counted
    (deferred ones are not, NFR-24), so attempt numbers keep growing and the natural key of every
    old attempt stays unique."""
    ids = [str(i) for i in job_ids]
    allowed = [str(s) for s in statuses]
    if not ids:
        return 0
    if not set(allowed) <= set(REQUEUABLE):
        raise ValueError(f"only {', '.join(REQUEUABLE)} jobs can be requeued, not {allowed}")
    with connection.cursor() as cur:
        cur.execute(
            f"""
            UPDATE jobs_job
               SET status = 'queued',
                   max_attempts = {counted_attempts_sql()} + attempt_budget,
                   not_before = NULL, published_at = NULL, finished_at = NULL,
                   cancel_requested_at = NULL, lease_owner = NULL, lease_expires_at = NULL,
                   last_error = NULL, final_published_at = NULL, updated_at = now(),
                   version = version + 1
             WHERE id = ANY(%s::uuid[]) AND status = ANY(%s::text[])
         RETURNING id::text, version
            """,
            [ids, allowed],
        )
        versions = dict(cur.fetchall())
    # A requeued job is no longer final, yet the read cache keeps a final row for a day: once the
    # requeue is committed, its entry is replaced by a mark of the new version, so a reader that
    # read the final row before the commit cannot store it again (apps/query/cache.py refuses a
    # row older than the mark). The notice wakes waiters, who read the job queued again.
    jobs_notify_final(list(versions))
    transaction.on_commit(lambda: job_read_cache_forget(versions))
    return len(versions)
