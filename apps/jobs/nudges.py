"""Nudges sent from a background thread: the caller never waits on Redis or the broker.

A nudge is a hint ("run the publisher now rather than at its next beat tick"); losing one costs
at most one beat interval, so it is the thing to drop when Redis is slow or down, never the
request that asked for it (NFR-1, NFR-2).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from apps.jobs.redis import WarnEvery

logger = logging.getLogger(__name__)


class BackgroundNudge:
    """Runs ``send`` on one daemon thread per process whenever asked, at most once per
    ``min_interval_s``: every ask that arrives meanwhile is folded into the next run. ``ask()``
    only sets an event, so a request thread pays microseconds however slow ``send`` is; errors are
    logged (at most every 10 s) and the thread goes on."""

    def __init__(self, send: Callable[[], None], *, name: str, min_interval_s: float):
        self._send = send
        self._name = name
        self._min_interval_s = min_interval_s
        self._wanted = threading.Event()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._warn = WarnEvery(logger)

    def ask(self) -> None:
        if self._pid != os.getpid():  # first ask in this process (or a forked child)
            self._start()
        self._wanted.set()

    def _start(self) -> None:
        with self._start_lock:
            if self._pid == os.getpid():
                return
            # After a fork the parent's thread does not exist here and the event may be set.
            self._wanted = threading.Event()
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
            self._pid = os.getpid()

    def _run(self) -> None:
        last = float("-inf")
        while True:
            self._wanted.wait()
            pause = last + self._min_interval_s - time.monotonic()
            if pause > 0:
                time.sleep(pause)  # asks meanwhile fold into this run
            self._wanted.clear()
            last = time.monotonic()
            try:
                self._send()
            except Exception as exc:  # noqa: BLE001 - a lost nudge costs one beat interval at most
                self._warn("%s failed (%s); beat will do it", self._name, exc)
