"""Nudges: "run now" signals for the control process's outbox publisher and receipts writer.

Beat runs both every second; a nudge makes a job start, or a receipt land in the ledger, within
milliseconds instead. A nudge is its kind's member in one Redis sorted set (``NUDGES``), which
therefore never holds more than one nudge of a kind, and any number of kinds are sent with one
``ZADD`` (a list per kind took an ``LPUSH`` and an ``LTRIM`` each: four commands per receipt
instead of one). No broker message either (a Celery task per nudge cost the scrape worker about a
seventh of its interpreter time and the control process one more task to receive and acknowledge
each time). The control process's listener (``scrapejobs/nudge_listener.py``) takes a member with
``BZPOPMIN`` and runs the publisher or the writer at once, each in a thread of its own, so that
however many nudges arrive while one runs, one more run follows it.

Who sends them, and how:
- a worker, after a fetch: queued on the pipeline that carries its receipt (``nudges_queue``), so
  a nudge costs it no round trip at all;
- intake, after a commit: through ``BackgroundNudge``, a thread per process, so that the request
  never waits on Redis (NFR-1, NFR-2: a nudge is the thing to drop when Redis is slow or down,
  never the request that asked for it).

Best effort throughout: beat's ticks remain the guarantee; a lost nudge costs one beat interval
(so does a nudge a process of the release before the sorted set sends to its old list while
versions are mixed; such a list holds one element at most).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from apps.redis_clients import WarnEvery, state_redis

logger = logging.getLogger(__name__)

NUDGES = "sj:nudges"  # the sorted set of pending nudges, one member per kind (score 0)
PUBLISH = "sj:nudge:publish"  # run the outbox publisher (a job was accepted, a worker slot freed)
WRITER = "sj:nudge:writer"  # run the receipts writer (a receipt was appended)


def nudges_queue(pipe: Any, *kinds: str) -> None:
    """Queue the nudges ``kinds`` on ``pipe`` (one command for them all, executed with the
    caller's)."""
    if kinds:
        pipe.zadd(NUDGES, dict.fromkeys(kinds, 0))


def nudges_send(*kinds: str) -> None:
    """Send the nudges ``kinds`` in one round trip; raises what Redis raises."""
    pipe = state_redis().pipeline(transaction=False)
    nudges_queue(pipe, *kinds)
    pipe.execute()


def nudge(*kinds: str) -> None:
    """``nudges_send``, with a Redis error logged, never raised."""
    try:
        nudges_send(*kinds)
    except redis.RedisError:
        logger.warning("nudge %s failed; beat will run it", ", ".join(kinds), exc_info=True)


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
