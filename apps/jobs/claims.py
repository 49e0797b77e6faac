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
from datetime import datetime, timedelta

import psycopg
from django.conf import settings
from django.db import connection
from django.utils import timezone


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


def job_claim(*, job_id: uuid.UUID | str, worker: str) -> ClaimedJob | None:
    """Take a queued job: ``queued → running``, attempt + 1, a lease, and the attempt's row.

    Returns None when the job is not ours to run (already taken, final, cancelled, or waiting for
    its retry time): a duplicate broker message is a no-op.
    """
    now = timezone.now()
    lease_until = now + timedelta(seconds=settings.SCRAPEJOBS_LEASE_SECONDS)
    # One statement, so one round trip and atomic without BEGIN/COMMIT: the conditional UPDATE
    # decides who owns the job, and the attempt's row is written only for the winner. Prepared on
    # its connection (a plain psycopg cursor binds server-side; prepare=True): it runs once per
    # job, and parsing and planning it each time cost PostgreSQL more than executing it.
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cur:
        cur.execute(
            """
            WITH claimed AS (
                UPDATE jobs_job
                   SET status = 'running', attempts = attempts + 1, lease_owner = %s,
                       lease_expires_at = %s, started_at = COALESCE(started_at, %s), updated_at = %s
                 WHERE id = %s AND status = 'queued' AND attempts < max_attempts
                   AND (not_before IS NULL OR not_before <= %s)
                   AND cancel_requested_at IS NULL
             RETURNING id, attempts, method, url, headers, body, timeout_s, max_attempts
            ), attempt AS (
                INSERT INTO jobs_attempt (job_id, number, worker, started_at)
                SELECT id, attempts, %s, %s FROM claimed
                ON CONFLICT (job_id, number) DO NOTHING
            )
            SELECT attempts, method, url, headers, body, timeout_s, max_attempts FROM claimed
            """,
            [worker, lease_until, now, now, uuid.UUID(str(job_id)), now, worker, now],
            prepare=True,
        )
        row = cur.fetchone()
    if row is None:
        return None
    attempt, method, url, headers, body, timeout_s, max_attempts = row
    if isinstance(headers, str):  # raw cursor: psycopg may hand jsonb back decoded or not
        import json  # noqa: PLC0415

        headers = json.loads(headers)
    return ClaimedJob(
        id=uuid.UUID(str(job_id)),
        attempt=attempt,
        method=method,
        url=url,
        headers=headers or {},
        body=body,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        lease_expires_at=lease_until,
    )


def jobs_renew_leases(*, leases: Sequence[tuple[uuid.UUID | str, int, str]]) -> set[tuple[str, int]]:
    """Heartbeat for every lease a worker process holds, in one statement: ``leases`` are
    ``(job_id, attempt, worker)``; returns the ``(job_id, attempt)`` renewed. Fenced by the attempt
    number: one missing from the answer is no longer its worker's (a newer attempt took the job
    after its lease expired, or it ended), and that worker must stop."""
    if not leases:
        return set()
    until = timezone.now() + timedelta(seconds=settings.SCRAPEJOBS_LEASE_SECONDS)
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE jobs_job AS j SET lease_expires_at = %s
              FROM unnest(%s::uuid[], %s::int[], %s::text[]) AS v(id, attempt, worker)
             WHERE j.id = v.id AND j.status = 'running' AND j.attempts = v.attempt
               AND j.lease_owner = v.worker
         RETURNING j.id::text, j.attempts
            """,
            [until, [str(j) for j, _, _ in leases], [a for _, a, _ in leases], [w for _, _, w in leases]],
        )
        return {(job_id, attempt) for job_id, attempt in cur.fetchall()}
