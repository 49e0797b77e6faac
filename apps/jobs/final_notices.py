"""Jobs that became final, announced two ways:

- at once, to ``?wait=`` listeners: a NOTIFY on ``JOB_FINAL_CHANNEL``, sent inside the transaction
  that made the jobs final, so it is heard only once that commits. A requeue (a final job made
  queued again) sends the same notice, so the web processes' read cache drops the final copy;
  ``jobs_final_among`` is the listeners' re-check for a notice that was lost;
- through the end-of-job outbox: whatever makes a job final sets its ``final_published_at`` to
  NULL in the same write; the webhooks' enqueuer takes such jobs (``jobs_final_unannounced_lock``),
  turns them into deliveries and stamps them (``jobs_final_announced_stamp``) in one transaction
  of its own. The writer's fold (apps/jobs/receipt_fold.py), which ends nearly every job, stamps a
  job without a ``callback_url`` in its final write instead: there is nothing to announce, and a
  stamp of its own would cost the row a version and its index entries (NFR-15).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from django.db import connection

# Channel for "this job reached a final state" (payload: job id); ?wait= listens on it.
JOB_FINAL_CHANNEL = "scrapejobs_job_final"


def jobs_notify_final(job_ids: Sequence[str]) -> None:
    """Tell ``?wait=`` listeners that these jobs are final: call it inside the transaction that
    made them final, so the NOTIFY is delivered only on commit. The writer's batch fold sends the
    same notification from its own multi-row statement."""
    if not job_ids:
        return
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_notify(%s, x) FROM unnest(%s::text[]) AS x", [JOB_FINAL_CHANNEL, list(job_ids)]
        )


def jobs_final_among(job_ids: Sequence[uuid.UUID | str]) -> set[str]:
    """Which of these jobs are final now: one statement for every ``?wait=`` caller of a web
    process, run on a timer, so that a lost NOTIFY costs at most one interval (FR-15)."""
    if not job_ids:
        return set()
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT id::text FROM jobs_job
             WHERE id = ANY(%s::uuid[]) AND status IN ('succeeded', 'failed', 'cancelled')
            """,
            [[str(i) for i in job_ids]],
        )
        return {row[0] for row in cur.fetchall()}


class FinalJob(NamedTuple):
    """A final job whose end is not announced yet, with what its announcement needs."""

    id: uuid.UUID
    status: str
    finished_at: datetime | None
    callback_url: str | None
    tenant_id: uuid.UUID
    # Re-fetching (FR-34): null unless the job asked (revalidate or callback_on).
    changed: bool | None = None
    previous_job: uuid.UUID | None = None
    callback_on: str | None = None


def jobs_final_unannounced_lock(*, limit: int) -> list[FinalJob]:
    """Lock up to ``limit`` final jobs whose end is not announced yet, oldest end first. Call it
    inside the transaction that announces them and stamps them (``jobs_final_announced_stamp``).

    SKIP LOCKED: two announcers split the rows, and a row locked for a requeue right now waits for
    the next tick."""
    with connection.cursor() as cur:
        # Uses the partial index jobs_final_unannounced.
        cur.execute(
            """
            SELECT id, status, finished_at, callback_url, tenant_id, changed, previous_job, callback_on
              FROM jobs_job
             WHERE status IN ('succeeded', 'failed', 'cancelled') AND final_published_at IS NULL
             ORDER BY finished_at
             LIMIT %s
               FOR UPDATE SKIP LOCKED
            """,
            [limit],
        )
        return [FinalJob(*row) for row in cur.fetchall()]


def jobs_final_announced_stamp(*, job_ids: Sequence[uuid.UUID | str], now: datetime) -> None:
    """Mark the end of these jobs as announced (they leave the end-of-job outbox)."""
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE jobs_job SET final_published_at = %s, version = version + 1 WHERE id = ANY(%s::uuid[])",
            [now, [str(i) for i in job_ids]],
        )
