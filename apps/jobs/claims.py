"""Claim and lease: a worker takes a queued job (``queued → running``, a new attempt) and keeps
its lease alive while it fetches.

Claiming is a conditional UPDATE whose row count says who won (healthchecks' "another process got
there first"): a duplicate broker message is a no-op. The attempt number is the fencing token of
the lease: a worker whose attempt is no longer the job's current one must stop.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection

from apps.jobs.models import counted_attempts_sql


@dataclass(frozen=True)
class ClaimedJob:
    id: uuid.UUID
    attempt: int
    method: str
    url: str
    headers: dict[str, str]
    body: str | None
    timeout_s: int
    max_attempts: int
    lease_expires_at: datetime
    result_key: str | None = None
    tenant_id: uuid.UUID | None = None  # robots.txt rules and the attempt's log lines
    render: str = "none"  # FR-30: "browser" is rendered by the browser component
    browser_options: dict[str, Any] | None = None
    # The tenant's switches as the claim read them (None: not read, e.g. a claim built by hand):
    # the fetch key's scope (apps.jobs.fetch_keys.fetch_key) and whether robots.txt is obeyed.
    share_fetches: bool | None = None
    obey_robots: bool | None = None
    # Its attempts so far that were deferrals and do not count (NFR-24): the receipt carries it,
    # so that the fold plans the retry on the counted attempts, as the sweeper does.
    deferred_attempts: int = 0
    # Re-fetching (FR-33, FR-34): whether the job asked to revalidate, and when its webhook is
    # sent (None: "final"). Either makes the worker look up the tenant's previous success.
    revalidate: bool = False
    callback_on: str | None = None


# job_claim's statement. One statement, so one round trip and atomic without BEGIN/COMMIT: the
# conditional UPDATE decides who owns the job, and the attempt's row is written only for the
# winner. Prepared on its connection (a plain psycopg cursor binds server-side; prepare=True): it
# runs once per job, and parsing and planning it each time cost PostgreSQL more than executing it.
# statement_timestamp() is now() for a statement run on its own (autocommit, as here); inside
# a caller's transaction (tests) it still moves on from one statement to the next.
# ``deferred``'s conditions sit in a CASE so that its only indexable clause is the id: written
# plainly they imply the predicate of the partial index of published, untaken jobs
# (jobs_published_untaken), and on statistics older than a burst the planner read the job
# through it, filtering every published job for one id (400 of them at the publisher's
# dispatch depth), on every claim (NFR-11, docs/benchmarks.md).
# ``deferred`` never touches the row ``claimed`` takes (``not_before`` is past there, still to
# come here), so the two updates of one statement never meet on a row.
CLAIM_SQL = f"""
WITH t AS (SELECT statement_timestamp() AS now), claimed AS (
    UPDATE jobs_job
       SET status = 'running', attempts = attempts + 1, lease_owner = %(worker)s,
           version = version + 1,
           lease_expires_at = t.now + make_interval(secs => %(lease_s)s),
           started_at = COALESCE(started_at, t.now), updated_at = t.now,
           fetch_key = COALESCE(%(fetch_key)s, fetch_key)
      FROM t
     WHERE id = %(id)s AND status = 'queued' AND {counted_attempts_sql()} < max_attempts
       AND (not_before IS NULL OR not_before <= t.now)
       AND cancel_requested_at IS NULL AND fetch_parked_at IS NULL
 RETURNING id, attempts, method, url, headers, body, timeout_s, max_attempts,
           lease_expires_at, tenant_id, render, browser_options, deferred_attempts, revalidate, callback_on
), attempt AS (
    INSERT INTO jobs_attempt (job_id, number, worker, started_at)
    SELECT id, attempts, %(worker)s, t.now FROM claimed, t
    ON CONFLICT (job_id, number) DO NOTHING
), deferred AS (
    UPDATE jobs_job
       SET published_at = NULL, updated_at = t.now, version = version + 1
      FROM t
     WHERE ctid = (SELECT ctid FROM jobs_job WHERE id = %(id)s)
       AND CASE WHEN status = 'queued' AND published_at IS NOT NULL AND not_before > t.now
                     AND cancel_requested_at IS NULL AND fetch_parked_at IS NULL
                THEN true ELSE false END
)
SELECT c.attempts, c.method, c.url, c.headers, c.body, c.timeout_s, c.max_attempts,
       c.lease_expires_at, c.tenant_id, c.render, c.browser_options, tt.share_fetches, tt.obey_robots,
       c.deferred_attempts, c.revalidate, c.callback_on
  FROM claimed AS c JOIN tenants_tenant AS tt ON tt.id = c.tenant_id
"""


def job_claim(*, job_id: uuid.UUID | str, worker: str, fetch_key: str | None = None) -> ClaimedJob | None:
    """Take a queued job: ``queued → running``, attempt + 1, a lease, and the attempt's row.

    Returns None when the job is not ours to run (already taken, final, cancelled, or waiting for
    its retry time): a duplicate broker message is a no-op. A job that was published but whose
    ``not_before`` has not come yet is put back in the outbox (``published_at`` cleared,
    ``not_before`` kept), so the publisher sends it again when it is due: the message is never
    simply dropped. A job parked on another job's fetch (single-flight,
    ``apps.jobs.singleflight``) is not taken; ``fetch_key``, when given, is stored with the claim
    (an elected fetch's key, which the jobs parked on it are settled by). A job that needed no
    decision (``max_age_s`` 0) is claimed without one: the claim returns the tenant's switches
    with the request, the worker computes the key from them and the fold stores it with the
    success (apps.scraping.attempt), so that later jobs can be served this fetch's result.

    Every time here is the database's (``statement_timestamp()``), never this worker's clock: whether the job is
    due, its lease's expiry and its start are compared by the publisher and the sweeper against
    the same clock, so a worker whose clock is off cannot see a due job as early, or write a lease
    that has already expired, or one that outlives it by its skew. Raises on a database error: the
    caller must then have the message delivered again (``apps.scraping.tasks``).
    """
    connection.ensure_connection()
    job_uuid = uuid.UUID(str(job_id))
    with psycopg.Cursor(connection.connection) as cur:
        cur.execute(
            CLAIM_SQL,
            {
                "worker": worker,
                "lease_s": float(settings.SCRAPEJOBS_LEASE_S),
                "id": job_uuid,
                "fetch_key": fetch_key,
            },
            prepare=True,
        )
        row = cur.fetchone()
    if row is None:
        return None
    return _claimed_job(job_uuid, row)


def _claimed_job(job_uuid: uuid.UUID, row: tuple[Any, ...]) -> ClaimedJob:
    """The claim statement's row as a ``ClaimedJob``."""
    (attempt, method, url, headers, body, timeout_s, max_attempts, lease_expires_at, tenant_id, render,
     browser_options, share_fetches, obey_robots, deferred_attempts, revalidate, callback_on) = row  # fmt: skip
    if isinstance(headers, str) or isinstance(browser_options, str):
        import json  # noqa: PLC0415 - raw cursor: psycopg may hand jsonb back decoded or not

        headers = json.loads(headers) if isinstance(headers, str) else headers
        browser_options = json.loads(browser_options) if isinstance(browser_options, str) else browser_options
    return ClaimedJob(
        id=job_uuid,
        attempt=attempt,
        method=method,
        url=url,
        headers=headers or {},
        body=body,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        lease_expires_at=lease_expires_at,
        tenant_id=tenant_id,
        render=render,
        browser_options=browser_options,
        share_fetches=share_fetches,
        obey_robots=obey_robots,
        deferred_attempts=deferred_attempts,
        revalidate=bool(revalidate),
        callback_on=callback_on,
    )


def jobs_renew_leases(*, leases: Sequence[tuple[uuid.UUID | str, int, str]]) -> set[tuple[str, int]]:
    """Heartbeat for every lease a worker process holds, in one statement: ``leases`` are
    ``(job_id, attempt, worker)``; returns the ``(job_id, attempt)`` renewed. Fenced by the attempt
    number: one missing from the answer is no longer its worker's (a newer attempt took the job
    after its lease expired, or it ended), and that worker must stop."""
    if not leases:
        return set()
    with connection.cursor() as cur:
        # The database's clock, as in job_claim: the sweeper compares against the same one.
        cur.execute(
            """
            UPDATE jobs_job AS j SET lease_expires_at = statement_timestamp() + make_interval(secs => %s),
                                    version = j.version + 1
              FROM unnest(%s::uuid[], %s::int[], %s::text[]) AS v(id, attempt, worker)
             WHERE j.id = v.id AND j.status = 'running' AND j.attempts = v.attempt
               AND j.lease_owner = v.worker
         RETURNING j.id::text, j.attempts
            """,
            [
                float(settings.SCRAPEJOBS_LEASE_S),
                [str(j) for j, _, _ in leases],
                [a for _, a, _ in leases],
                [w for _, _, w in leases],
            ],
        )
        return {(job_id, attempt) for job_id, attempt in cur.fetchall()}
