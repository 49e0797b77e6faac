"""The outbox publisher (contract 3.2): queued rows with an empty ``published_at`` become broker
messages, one per job, on the queue of the job's priority.

Delivery is at-least-once. The rows are locked (``FOR UPDATE SKIP LOCKED``) from the select to
the stamp, so two publishers running at once (beat's tick and an intake nudge) never send the same
row in one round. The broker send happens inside that short transaction on purpose: it is the one
piece of network I/O that must be covered by the row lock. A crash between the send and the commit
leaves the rows unstamped and they are sent again next round; the duplicate message is harmless
because ``job_claim`` is a conditional update.
"""

from __future__ import annotations

import time

from django.db import connection, transaction
from django.utils import timezone

SCRAPE_TASK = "apps.scraping.tasks.scrape_job"


def scrape_queue(priority: str) -> str:
    return f"jobs.{priority}"


# Uses the partial index jobs_outbox_unpublished (status = 'queued' AND published_at IS NULL):
# it holds only the rows still to send, so this stays cheap however large the jobs table grows.
_SELECT_UNPUBLISHED = """
    SELECT id::text, priority
      FROM jobs_job
     WHERE status = 'queued' AND published_at IS NULL
       AND (not_before IS NULL OR not_before <= %s)
     ORDER BY created_at
     LIMIT %s
       FOR UPDATE SKIP LOCKED
"""


def outbox_publish_batch(*, limit: int) -> int:
    """Send up to ``limit`` unpublished jobs whose retry time (``not_before``) has come, oldest
    first, over one producer connection; stamp them. Returns how many were sent."""
    from scrapejobs.celery import app  # noqa: PLC0415 - Celery app imports Django settings

    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_SELECT_UNPUBLISHED, [now, limit])
        rows = cur.fetchall()
        if not rows:
            return 0
        with app.producer_or_acquire() as producer:
            for job_id, priority in rows:
                app.send_task(SCRAPE_TASK, args=[job_id], queue=scrape_queue(priority), producer=producer)
        cur.execute(
            "UPDATE jobs_job SET published_at = %s WHERE id = ANY(%s::uuid[]) AND published_at IS NULL",
            [timezone.now(), [job_id for job_id, _ in rows]],
        )
    return len(rows)


def outbox_publish(*, batch_size: int, budget_s: float) -> int:
    """Publish batch after batch while full batches keep coming, for at most about ``budget_s``
    (then the next beat tick carries on). Returns how many jobs were sent."""
    deadline = time.monotonic() + budget_s
    total = 0
    while True:
        sent = outbox_publish_batch(limit=batch_size)
        total += sent
        if sent < batch_size or time.monotonic() >= deadline:
            return total
