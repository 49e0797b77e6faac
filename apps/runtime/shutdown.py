"""This worker process's stop flag: set when Celery begins a warm shutdown (SIGTERM / SIGINT).

Code that runs long looks at ``worker_is_stopping()`` and stops early (the webhook deliverer
claims no more deliveries). What a stopping worker does with the scrape jobs it still holds once
its grace period is over is ``apps.scheduling.shutdown_watchdog``.
"""

from __future__ import annotations

import threading
from typing import Any

from celery.signals import worker_shutting_down

_stopping = threading.Event()


def worker_is_stopping() -> bool:
    """True once this worker process was told to stop (SIGTERM / SIGINT)."""
    return _stopping.is_set()


@worker_shutting_down.connect
def _on_worker_shutting_down(**_: Any) -> None:
    """Runs in the worker's main process from the signal handler: it only sets the flag."""
    _stopping.set()
