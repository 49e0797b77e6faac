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

from celery.signals import worker_init, worker_shutting_down
from django.conf import settings

logger = logging.getLogger(__name__)

# The scrape task and how its messages name the job (apps/scraping/tasks.py).
SCRAPE_TASK = "apps.scraping.tasks.scrape_job"

# Set by the first SIGTERM / SIGINT: a second one does not start a second watchdog.
_watchdog_started = threading.Event()
# This process's worker (set at its start): its consumer holds the messages received and not
# yet started.
_worker: Any = None


@worker_init.connect
def _remember_worker(sender: Any = None, **_: Any) -> None:
    global _worker
    _worker = sender


def received_messages_restore() -> int:
    """Put the messages this process received and has not acknowledged back on their queues, as
    a warm shutdown that completes does when its channel closes; returns how many. In the scrape
    worker, whose messages are acknowledged as they start, those are the ones no thread had
    started (all were busy); in the control process, whose tasks are acknowledged late, its
    running tasks' too, which are idempotent and would be redelivered anyway. The exit below would
    otherwise drop them: the scrape worker keeps no copy in the broker (no ack emulation,
    scrapejobs/celery.py), and with one the copy came back only after the visibility timeout, so
    their jobs waited for the sweeper's republish."""
    channel = getattr(getattr(getattr(_worker, "consumer", None), "task_consumer", None), "channel", None)
    qos = getattr(channel, "qos", None)
    if qos is None:
        return 0
    n = len(getattr(qos, "_delivered", ()))
    if n:
        qos.restore_unacked()
    return n


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
    """Give back what this process holds, then end it without waiting for its threads: the
    messages it received and had not started, and the jobs it runs."""
    from apps.jobs.sweeping import jobs_release_held  # noqa: PLC0415 - Django is ready by now

    try:
        restored = received_messages_restore()
        if restored:
            logger.warning("shutdown grace over: %d received messages not started put back", restored)
    except Exception:  # noqa: BLE001 - the broker may be away; the sweeper republishes their jobs
        logger.exception("could not put back the received messages; the sweeper will republish their jobs")
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
