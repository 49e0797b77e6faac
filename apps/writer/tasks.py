"""The writer's periodic task. Thin: it calls one service."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from apps.writer.flush import writer_flush as _writer_flush

# A batch may legitimately take up to WRITE_TIMEOUT_SECONDS; the limits leave it room to finish.
_SOFT_LIMIT = int(settings.SCRAPEJOBS_DATABASE_WRITE_TIMEOUT_SECONDS) + 60


# Beat runs it every SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S on `control` (scrapejobs/celery.py). Safe to
# run twice at once: the second finds the lease taken and returns.
@shared_task(
    name="apps.writer.tasks.writer_flush",
    queue="control",
    soft_time_limit=_SOFT_LIMIT,
    time_limit=_SOFT_LIMIT + 30,
)
def writer_flush() -> dict[str, int]:
    # Drain for at most 0.8x the cadence: the next tick finds the lease free, and a writer
    # process's control threads are never all held by flushes.
    stats = _writer_flush(budget_s=0.8 * settings.SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S)
    return {"held": int(stats.held), "acked": stats.acked, "applied": stats.applied, "dead": stats.dead}
