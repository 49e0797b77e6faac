"""The scheduler's periodic tasks. Thin: each calls one service."""

from __future__ import annotations

from celery import shared_task

from apps.jobs.intake import idempotency_keys_expire
from apps.scheduling import shutdown_watchdog  # noqa: F401 - connects the worker shutdown handlers
from apps.scheduling.services import jobs_sweep_stuck


# Beat runs it every SCRAPEJOBS_SWEEP_INTERVAL_S on `control` (scrapejobs/celery.py). Safe to run
# twice at once: both sweeps claim rows with SKIP LOCKED.
@shared_task(
    name="apps.scheduling.tasks.sweep_stuck_jobs", queue="control", soft_time_limit=50, time_limit=60
)
def sweep_stuck_jobs() -> dict[str, int]:
    stats = jobs_sweep_stuck()
    return {
        "requeued": stats.requeued,
        "failed": stats.failed,
        "cancelled": stats.cancelled,
        "republished": stats.republished,
    }


# Beat runs it every IDEMPOTENCY_EXPIRE_INTERVAL_S (scrapejobs/celery.py). Safe to run twice at
# once (SKIP LOCKED).
@shared_task(
    name="apps.scheduling.tasks.idempotency_keys_expire", queue="control", soft_time_limit=50, time_limit=60
)
def idempotency_keys_expire_task() -> int:
    return idempotency_keys_expire()
