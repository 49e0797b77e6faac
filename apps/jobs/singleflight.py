"""Single-flight fetch: jobs asking for the same thing share one fetch.

A job's **fetch key** (``apps.jobs.fetch_keys``) is the SHA-256 of its request fingerprint (method,
normalised URL, headers, body hash) and of its scope: the tenant, or ``shared`` when the tenant's
operator let it share fetches (``Tenant.share_fetches``), so sharing happens only between tenants
that both allow it. The worker computes it, so jobs written by intake and jobs bulk-loaded
straight into the ledger get it the same way. A job with ``max_age_s`` 0 takes no stored result
and waits for no other fetch: nothing is decided, the worker claims it at once and computes the
key from what the claim returns (``job_fetch_key``), and the fold stores the key with the job's
success, the only version later jobs look it up in. For a job with ``max_age_s`` > 0 the worker
decides first (``job_fetch_decide``, before the politeness gate and the claim):

- **served**: a job with the same key succeeded within ``max_age_s``: the job succeeds at once
  with that stored body (same key, size and SHA-256), its attempt recording which attempt it was
  served from; the target is not asked;
- **fetch**: it won the insert of the key's in-flight row (``InFlightFetch``, primary key = fetch
  key), or took over a row whose attempt is over; it goes on to the gate and the claim;
- **parked**: another job's fetch of the key is to come or running: the job stays ``queued`` with
  ``fetch_parked_at`` set, holding no message, no worker thread and no attempt.

When the elected attempt ends, whoever ends it (the writer's fold, the sweeper for a lost lease,
a cancel of the still-queued elected job) calls ``jobs_fetch_settle`` in the same transaction: the
in-flight row goes, and the parked jobs are all served a success or a permanent failure (each
with its own attempt row, NOTIFYed final), or, after anything else (a temporary failure, a lost
lease, a cancel), exactly one of them is put back in the outbox to fetch in its place.

The decision and the settling of one key never interleave: both hold a transaction-scoped
advisory lock on the key, so a job never parks behind a fetch whose waiters were just served.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from django.db import connection, transaction

from apps.jobs.fetch_keys import job_fetch_key
from apps.jobs.final_notices import JOB_FINAL_CHANNEL
from apps.jobs.models import AttemptOutcome, JobStatus, counted_attempts_sql

# How long a decision, once it holds its key's lock, waits for a row lock before it gives up (the
# message is sent again): less than PostgreSQL's deadlock_timeout (1 s), so in a lock cycle with
# the writer's fold (which holds job rows and waits for the key) the decision is the one that yields.
DECIDE_LOCK_TIMEOUT_MS = 500

# An in-flight row's attempt is still to come (its job queued, elected, not parked, not being
# cancelled) or running. Anything else: that attempt is over and the row is to be settled.
LIVE_FETCH_SQL = """(
    (h.status = 'queued' AND h.attempts < f.attempt AND h.cancel_requested_at IS NULL
     AND h.fetch_parked_at IS NULL)
    OR (h.status = 'running' AND h.attempts = f.attempt)
)"""


@dataclass(frozen=True)
class FetchDecision:
    """``fetch``: go on to the politeness gate and the claim (``key`` is stored by the claim;
    None when the job is not claimable now, which the claim then says). ``served`` and ``parked``:
    the job needs no worker now."""

    kind: Literal["fetch", "served", "parked"]
    key: str | None = None


def job_fetch_decide(*, job_id: uuid.UUID | str) -> FetchDecision:
    """Decide whether this queued, due job fetches, is served a young stored result, or waits
    for the fetch in flight for its key (see the module's docstring). A job with ``max_age_s`` 0
    always fetches (one read: its key). Raises on a database error, a lock wait past
    ``DECIDE_LOCK_TIMEOUT_MS`` included: the caller sends the message again."""
    try:
        job_uuid = uuid.UUID(str(job_id))
    except ValueError as e:  # a bad message: the task fails, its log line naming what it got
        raise ValueError(f"not a job id: {job_id!r}") from e
    job = _decidable_job(job_uuid)
    if job is None:
        return FetchDecision("fetch")
    key = job_fetch_key(
        method=job["method"],
        url=job["url"],
        headers=job["headers"],
        body=job["body"],
        render=job["render"],
        browser_options=job["browser_options"],
        tenant_id=job["tenant_id"],
        share_fetches=job["share_fetches"],
        obey_robots=job["obey_robots"],
    )
    if job["max_age_s"] == 0:
        return FetchDecision("fetch", key)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"SET LOCAL lock_timeout = {DECIDE_LOCK_TIMEOUT_MS}")
        # Serving a stored success needs no lock on the key: it is committed and stays valid.
        served = _serve_young(cur, key=key, job=job)
        if served is not None:
            return served
        # Electing and parking must not interleave with the settling of the key. Queueing behind
        # the other decisions of the key is expected (a burst of identical jobs): the key's lock
        # is waited for without a bound; the row locks after it are not.
        cur.execute("SET LOCAL lock_timeout = 0")
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])
        cur.execute(f"SET LOCAL lock_timeout = {DECIDE_LOCK_TIMEOUT_MS}")
        served = _serve_young(cur, key=key, job=job)  # the fetch may have ended meanwhile
        if served is not None:
            return served
        if _elect(cur, key=key, job_id=job["id"], attempt=job["attempts"] + 1):
            return FetchDecision("fetch", key)
        cur.execute(
            """
            UPDATE jobs_job
               SET fetch_key = %s, fetch_parked_at = now(), published_at = COALESCE(published_at, now()),
                   updated_at = now(), version = version + 1
             WHERE id = %s AND status = 'queued' AND cancel_requested_at IS NULL
            """,
            [key, job["id"]],
        )
        return FetchDecision("parked" if cur.rowcount else "fetch", key)


def _serve_young(cur: Any, *, key: str, job: dict[str, Any]) -> FetchDecision | None:
    """Serve the job a young stored success of its key, if there is one (None: there is not)."""
    source = _young_result(cur, key=key, max_age_s=job["max_age_s"])
    if source is None:
        return None
    served = _serve(cur, [source], only_job=job["id"])
    return FetchDecision("served" if served else "fetch", key)


# The decision's read (one per job, on the worker's hot path). Looked up by primary key alone, the
# conditions computed in the select list: with ``status = 'queued'`` in its WHERE the planner may
# read the job through a partial index of the queued rows (jobs_queued_backlog) and filter the
# whole backlog for one id. It does so on a ledger whose statistics are older than a burst (a
# fresh table, autovacuum not yet run), where it cost 0.6 ms of PostgreSQL per job with 3,000
# jobs queued, growing with the backlog (docs/benchmarks.md). Prepared on its connection, as the
# claim is: planning it each time cost more than running it (NFR-11, NFR-15).
DECIDABLE_JOB_SQL = f"""
    SELECT j.id, j.method, j.url, j.headers, j.body, j.max_age_s, j.attempts, j.tenant_id,
           t.share_fetches, t.obey_robots, j.render, j.browser_options,
           (j.status = 'queued' AND j.cancel_requested_at IS NULL
            AND {counted_attempts_sql("j")} < j.max_attempts
            AND (j.not_before IS NULL OR j.not_before <= statement_timestamp())) AS decidable
      FROM jobs_job AS j JOIN tenants_tenant AS t ON t.id = j.tenant_id
     WHERE j.id = %s
"""


def _decidable_job(job_id: uuid.UUID) -> dict[str, Any] | None:
    """The request and tenant setting of a job the claim could take now, or None."""
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cur:
        cur.execute(DECIDABLE_JOB_SQL, [job_id], prepare=True)
        row = cur.fetchone()
        if row is None:
            return None
        names = [c.name for c in cur.description or ()]
    job = dict(zip(names, row, strict=True))
    if not job.pop("decidable"):
        return None
    for name in ("headers", "browser_options"):
        if isinstance(job[name], str):
            job[name] = json.loads(job[name])
    return job


# What a served job copies: the source job, the attempt it fetched in, and the outcome.
_SOURCE_COLUMNS = (
    "key", "source_job", "source_attempt", "status", "outcome", "http_status", "error_class",
    "error", "last_error", "result_key", "result_size", "result_sha256", "result_content_type",
    "result_http_status", "result_stored_at", "result_final_url", "result_headers",
)  # fmt: skip


def _young_result(cur: Any, *, key: str, max_age_s: int) -> dict[str, Any] | None:
    """A success for ``key`` whose body was fetched within ``max_age_s`` (FR-15), as a source to
    serve from; served jobs point at the attempt that fetched.

    Aged by ``result_stored_at``, the end of the attempt that really fetched the body: a served
    copy carries its source's, so a chain of served copies never makes an old body young (a
    served job's own ``finished_at`` is when it was served). ``finished_at`` is never earlier than
    ``result_stored_at``, so its bound only narrows the index range (jobs_by_fetch_key)."""
    cur.execute(
        """
        SELECT s.fetch_key, COALESCE(a.served_from_job, s.id), COALESCE(a.served_from_attempt, s.attempts),
               'succeeded', 'succeeded', s.result_http_status, NULL, NULL, NULL, s.result_key,
               s.result_size, s.result_sha256, s.result_content_type, s.result_http_status,
               s.result_stored_at, s.result_final_url, s.result_headers::text
          FROM jobs_job AS s
          LEFT JOIN jobs_attempt AS a ON a.job_id = s.id AND a.number = s.attempts
         WHERE s.fetch_key = %(key)s AND s.status = 'succeeded' AND s.result_key IS NOT NULL
           AND s.finished_at >= statement_timestamp() - make_interval(secs => %(age)s)
           AND s.result_stored_at >= statement_timestamp() - make_interval(secs => %(age)s)
         ORDER BY s.finished_at DESC
         LIMIT 1
        """,
        {"key": key, "age": max_age_s},
    )
    row = cur.fetchone()
    return None if row is None else dict(zip(_SOURCE_COLUMNS, row, strict=True))


def _elect(cur: Any, *, key: str, job_id: uuid.UUID, attempt: int) -> bool:
    """Insert the key's in-flight row for ``job_id``'s next attempt; an existing row is taken
    over only when its attempt is over (or it is this job's own, elected before a deferral)."""
    cur.execute(
        f"""
        INSERT INTO jobs_inflightfetch AS f (key, job_id, attempt, created_at)
        VALUES (%s, %s, %s, now())
        ON CONFLICT (key) DO UPDATE
           SET job_id = EXCLUDED.job_id, attempt = EXCLUDED.attempt, created_at = EXCLUDED.created_at
         WHERE f.job_id = EXCLUDED.job_id
            OR NOT EXISTS (SELECT 1 FROM jobs_job AS h WHERE h.id = f.job_id AND {LIVE_FETCH_SQL})
        RETURNING f.job_id
        """,
        [key, job_id, attempt],
    )
    if cur.fetchone() is None:
        return False
    cur.execute(
        "UPDATE jobs_job SET fetch_key = %s, fetch_parked_at = NULL, version = version + 1 WHERE id = %s",
        [key, job_id],
    )
    return True


def jobs_fetch_settle(job_ids: Sequence[uuid.UUID | str]) -> list[str]:
    """Release the in-flight rows of these jobs whose elected attempt is over, and settle the
    jobs parked on them: served the outcome when it is a success or a permanent failure, else one
    of them put back in the outbox to fetch. Call it inside the transaction that ended the
    attempts (after the statement that did), so parking and settling never miss each other.
    Returns the ids of the jobs it made final (already NOTIFYed, on commit)."""
    ids = [str(i) for i in job_ids]
    if not ids:
        return []
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT f.key FROM jobs_inflightfetch AS f JOIN jobs_job AS h ON h.id = f.job_id
             WHERE f.job_id = ANY(%s::uuid[]) AND NOT {LIVE_FETCH_SQL}
             ORDER BY f.key
            """,
            [ids],
        )
        keys = [k for (k,) in cur.fetchall()]
        if not keys:
            return []
        # Key order everywhere, so two settlers (an old writer and its successor) never deadlock.
        cur.execute(
            "SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0)))"
            " FROM (SELECT k FROM unnest(%s::text[]) AS k ORDER BY k) AS s",
            [keys],
        )
        cur.execute(
            f"""
            WITH gone AS (
                DELETE FROM jobs_inflightfetch AS f USING jobs_job AS h
                 WHERE f.key = ANY(%s::text[]) AND h.id = f.job_id AND NOT {LIVE_FETCH_SQL}
             RETURNING f.key, h.id, h.attempts, h.status, h.last_error, h.result_key, h.result_size,
                       h.result_sha256, h.result_content_type, h.result_http_status, h.result_stored_at,
                       h.result_final_url, h.result_headers
            )
            SELECT g.key, g.id, g.attempts, g.status, a.outcome, a.http_status, a.error_class, a.error,
                   g.last_error::text, g.result_key, g.result_size, g.result_sha256,
                   g.result_content_type, g.result_http_status, g.result_stored_at, g.result_final_url,
                   g.result_headers::text
              FROM gone AS g LEFT JOIN jobs_attempt AS a ON a.job_id = g.id AND a.number = g.attempts
            """,
            [keys],
        )
        ended = [dict(zip(_SOURCE_COLUMNS, row, strict=True)) for row in cur.fetchall()]
        shared = [e for e in ended if _shareable(e)]
        handed = [e["key"] for e in ended if not _shareable(e)]
        finals = _serve_all(cur, shared) if shared else []
        if handed:
            _hand_over(cur, handed)
        return finals


def _shareable(ended: dict[str, Any]) -> bool:
    """A success, or a failure another fetch would repeat (404...): every waiter gets it. A
    temporary failure, a lost lease or a cancel is the elected job's own: another job fetches."""
    if ended["status"] == JobStatus.SUCCEEDED:
        return ended["result_key"] is not None
    return ended["status"] == JobStatus.FAILED and ended["outcome"] == AttemptOutcome.PERMANENT


def _hand_over(cur: Any, keys: list[str]) -> None:
    """Put the oldest parked job of each key back in the outbox: it takes the fetch over."""
    cur.execute(
        """
        UPDATE jobs_job SET fetch_parked_at = NULL, published_at = NULL, updated_at = now(),
                            version = version + 1
         WHERE id IN (SELECT DISTINCT ON (fetch_key) id FROM jobs_job
                       WHERE fetch_key = ANY(%s::text[]) AND status = 'queued'
                         AND fetch_parked_at IS NOT NULL AND cancel_requested_at IS NULL
                       ORDER BY fetch_key, id)
           AND status = 'queued' AND fetch_parked_at IS NOT NULL
        """,
        [keys],
    )


# The parked jobs one serving statement makes final at most: a fetch ten thousand identical jobs
# wait for is settled in bounded statements (each its row locks, WAL and NOTIFYs), in the same
# transaction, rather than in one statement of unbounded size.
SERVE_CHUNK = 1000


def _serve_all(cur: Any, sources: list[dict[str, Any]]) -> list[str]:
    """``_serve`` for every job parked on ``sources``, ``SERVE_CHUNK`` at a time."""
    finals: list[str] = []
    while True:
        served = _serve(cur, sources, limit=SERVE_CHUNK)
        finals += served
        if len(served) < SERVE_CHUNK:
            return finals


def _serve(
    cur: Any, sources: list[dict[str, Any]], *, only_job: uuid.UUID | None = None, limit: int | None = None
) -> list[str]:
    """Make final, with the source's outcome, the jobs parked on each source's key (or just
    ``only_job``, still queued): one new attempt each, marked served from the source's attempt,
    NOTIFYed and put in the end-of-job outbox like every final job. Returns their ids."""
    cols = {c: [s[c] for s in sources] for c in _SOURCE_COLUMNS}
    cols["last_error"] = [None if v is None else _json_text(v) for v in cols["last_error"]]
    cur.execute(
        """
        WITH src AS (
            SELECT * FROM unnest(%(key)s::text[], %(source_job)s::uuid[], %(source_attempt)s::int[],
                                 %(status)s::text[], %(outcome)s::text[], %(http_status)s::int[],
                                 %(error_class)s::text[], %(error)s::text[], %(last_error)s::jsonb[],
                                 %(result_key)s::text[], %(result_size)s::bigint[],
                                 %(result_sha256)s::text[], %(result_content_type)s::text[],
                                 %(result_http_status)s::int[], %(result_stored_at)s::timestamptz[],
                                 %(result_final_url)s::text[], %(result_headers)s::jsonb[])
                   AS s(key, source_job, source_attempt, status, outcome, http_status, error_class,
                        error, last_error, result_key, result_size, result_sha256,
                        result_content_type, result_http_status, result_stored_at, result_final_url,
                        result_headers)
        ), waiting AS (
            SELECT j.id, j.attempts + 1 AS number, src.*
              FROM jobs_job AS j JOIN src
                ON CASE WHEN %(only)s::uuid IS NULL THEN j.fetch_key = src.key AND j.fetch_parked_at IS NOT NULL
                        ELSE j.id = %(only)s::uuid END
             WHERE j.status = 'queued' AND j.cancel_requested_at IS NULL
             ORDER BY j.id
             LIMIT %(limit)s
               FOR UPDATE OF j
        ), moved AS (
            UPDATE jobs_job AS j
               SET status = w.status, attempts = w.number, fetch_key = w.key, fetch_parked_at = NULL,
                   version = j.version + 1,
                   started_at = COALESCE(j.started_at, now()), finished_at = now(),
                   final_published_at = NULL, not_before = NULL, last_error = w.last_error,
                   result_key = w.result_key, result_size = w.result_size,
                   result_sha256 = w.result_sha256, result_content_type = w.result_content_type,
                   result_http_status = w.result_http_status, result_stored_at = w.result_stored_at,
                   result_final_url = w.result_final_url, result_headers = w.result_headers,
                   updated_at = now()
              FROM waiting AS w
             WHERE j.id = w.id
         RETURNING j.id, w.number, w.outcome, w.http_status, w.error_class, w.error, w.source_job,
                   w.source_attempt
        ), attempt AS (
            INSERT INTO jobs_attempt (job_id, number, worker, started_at, finished_at, outcome,
                                      http_status, error_class, error, duration_ms,
                                      served_from_job, served_from_attempt)
            SELECT id, number, '', now(), now(), outcome, http_status, error_class, error, 0,
                   source_job, source_attempt
              FROM moved
                ON CONFLICT (job_id, number) DO NOTHING
        )
        SELECT id::text, pg_notify(%(channel)s, id::text) FROM moved
        """,
        {**cols, "only": only_job, "limit": limit, "channel": JOB_FINAL_CHANNEL},
    )
    return [job_id for job_id, _ in cur.fetchall()]


def _json_text(value: Any) -> str:
    """A jsonb value as text, whichever form the cursor handed it back in."""
    return value if isinstance(value, str) else json.dumps(value)
