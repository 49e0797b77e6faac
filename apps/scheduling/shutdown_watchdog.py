"""Graceful stop for Celery workers, with a bound.

What Celery does on SIGTERM (a warm shutdown): the worker stops consuming, and the threads pool
waits for the running tasks (``ThreadPoolExecutor.shutdown``) without any limit; soft and hard
time limits are not enforced by the threads pool at all. A scrape that drips for minutes would
hold the process, and whoever sent SIGTERM (a deploy, Kubernetes after its grace period) then
SIGKILLs it, leaving its jobs ``running`` until their leases expire.

So on SIGTERM a watchdog starts. If the process is still alive after
``SCRAPEJOBS_WORKER_SHUTDOWN_GRACE_S`` it gives back the scrape jobs it still holds (the attempt
is recorded as ``lost`` and the job is requeued at once, exactly what the sweeper would do when
the lease expired) and exits. Jobs that finish within the grace period finish normally. If the
process is SIGKILLed instead, nothing here runs and the sweeper recovers the jobs after their
lease: this only shortens that wait.

Code that runs long can also look at ``apps.runtime.shutdown.worker_is_stopping()`` (set by the
same signal) and stop early.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery.signals import worker_shutting_down
from django.conf import settings

logger = logging.getLogger(__name__)

# The scrape task and how its messages name the job (apps/scraping/tasks.py).
SCRAPE_TASK = "apps.scraping.tasks.scrape_job"

# Set by the first SIGTERM / SIGINT: a second one does not start a second watchdog.
_watchdog_started = threading.Event()


def _job_id_of(request: Any) -> str | None:
    kwargs = getattr(request, "kwargs", None) or {}
    args = getattr(request, "args", None) or ()
    value = kwargs.get("job_id") or (args[0] if args else None)
    return str(value) if value else None


def held_scrape_jobs() -> list[str]:
    """Ids of the jobs whose scrape task this process is running right now."""
    from celery.worker import state  # noqa: PLC0415 - only meaningful inside a worker

    return [
        job_id
        for req in list(state.active_requests)
        if getattr(req, "name", None) == SCRAPE_TASK and (job_id := _job_id_of(req))
    ]


def release_and_exit(*, hostname: str, exit_code: int = 0) -> None:
    """Give back what this process holds, then end it without waiting for its threads."""
    from apps.jobs.sweeping import jobs_release_held  # noqa: PLC0415 - Django is ready by now

    try:
        held = held_scrape_jobs()
        if held:
            stats = jobs_release_held(job_ids=held, lease_owner_prefix=hostname)
            logger.warning(
                "shutdown grace over: gave back %d of %d running jobs (%d requeued, %d failed)",
                stats.lost,
                len(held),
                stats.requeued,
                stats.failed,
            )
    except Exception:  # noqa: BLE001 - the database may be the reason we stop; the sweeper still recovers
        logger.exception("could not give back running jobs; the sweeper will after their leases")
    finally:
        logging.shutdown()
        os._exit(exit_code)


def _watchdog(hostname: str, grace: float) -> None:
    # Sleeps as a daemon thread: if the warm shutdown completes first, the process exits and
    # this thread never wakes.
    threading.Event().wait(grace)
    release_and_exit(hostname=hostname)


@worker_shutting_down.connect
def _on_worker_shutting_down(sender: str | None = None, how: str | None = None, **_: Any) -> None:
    """Runs in the worker's main process from the signal handler: keep it to starting a thread."""
    if _watchdog_started.is_set():
        return
    _watchdog_started.set()
    grace = float(settings.SCRAPEJOBS_WORKER_SHUTDOWN_GRACE_S)
    hostname = str(sender or "")
    threading.Thread(target=_watchdog, args=(hostname, grace), name="shutdown-watchdog", daemon=True).start()
