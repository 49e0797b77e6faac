"""The export's periodic task. Thin: it calls one service."""

from __future__ import annotations

from celery import shared_task


# Beat runs it every EXPORT_DAILY_INTERVAL_S on `control` (scrapejobs/celery.py); a day already
# exported costs one existence check, so running it hourly only makes a missed day come sooner.
@shared_task(
    name="apps.exports.tasks.export_daily",
    queue="control",
    soft_time_limit=3 * 3600,
    time_limit=3 * 3600 + 60,
)
def export_daily_task() -> list[dict[str, object]]:
    # The export brings pyarrow: imported by the run, not by every process that loads the tasks.
    from apps.exports.export import export_daily  # noqa: PLC0415 - NFR-42, start-up imports

    return [
        {"prefix": o.prefix, "written": o.written, "jobs": o.jobs, "attempts": o.attempts, "parts": o.parts}
        for o in export_daily()
    ]
