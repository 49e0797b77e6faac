"""Retention's periodic task. Thin: it calls one service."""

from __future__ import annotations

from celery import shared_task

from apps.results.storage_retention import retention_run


# Beat runs it every RETENTION_INTERVAL_S on `control` (scrapejobs/celery.py). Safe to run twice
# at once: the second finds the first's lock and does nothing.
@shared_task(name="apps.results.tasks.retention_run", queue="control", soft_time_limit=280, time_limit=300)
def retention_run_task() -> dict[str, int | bool]:
    stats = retention_run(budget_s=240.0)
    return {
        "results_deleted": stats.results_deleted,
        "orphans_deleted": stats.orphans_deleted,
        "jobs_pruned": stats.jobs_pruned,
        "delete_failures": stats.delete_failures,
        "busy": stats.busy,
    }
