"""The control process's nudge listener (apps.jobs.nudges): runs the outbox publisher or the
receipts writer as soon as somebody asks, without a broker message per request.

One thread blocks on ``BZPOPMIN`` over the nudges' sorted set; each kind has a runner thread that
runs its task's body (the same function beat's tick runs as a Celery task) whenever it is poked. A poke
while the runner is busy is remembered, once: however many nudges arrive during a run, one more
run follows it, which is what both the publisher (refill the room that opened meanwhile) and the
writer (read the receipts appended meanwhile) need. Each run is safe next to beat's: the publisher
takes its advisory lock, the writer its lease.

Started once per process by ``scrapejobs.celery`` in a worker that consumes the ``control`` queue
(the "control" component). If no such process runs, nothing is lost: beat still runs both every
second.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import redis
from django.conf import settings
from django.db import connection

from apps.jobs.nudges import NUDGES, PUBLISH, WRITER
from apps.redis_clients import state_redis

logger = logging.getLogger(__name__)

# BZPOPMIN's own timeout: how often the listener wakes to see whether it should stop.
BLOCK_S = 1
# Runs of one kind start at least SCRAPEJOBS_NUDGE_GAP_S apart (default 0.1 s). Nudges come with
# every receipt and every finished fetch; back-to-back runs each carrying a handful of jobs spend
# the control process's time on per-run overhead (the publisher's planning queries, the writer's
# lease and reads): without a gap, throughput at a 1 ms target fell by half. At 50 ms a run at a
# 500 ms target carried about 8 jobs, and the control process and its PostgreSQL sessions spent
# about as much CPU per job again as at 1 ms; 100 ms halves the runs for 50 ms more, at most, before
# a finished job is folded or the broker refilled (docs/settings.md). A run after a quiet spell
# starts at once.


class _Runner:
    def __init__(self, name: str, fn: Callable[[], object], stop: threading.Event, gap_s: float):
        self.fn = fn
        self.stop = stop
        self.gap_s = gap_s
        self.poked = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"nudge-{name}", daemon=True)

    def poke(self) -> None:
        self.poked.set()

    def _run(self) -> None:
        last = 0.0
        while not self.stop.is_set():
            if not self.poked.wait(BLOCK_S):
                continue
            gap = last + self.gap_s - time.monotonic()
            if gap > 0 and self.stop.wait(gap):  # nudges arriving meanwhile join this run
                return  # stopping: no run that would start after the stop was asked
            self.poked.clear()  # before the run: a nudge during the run means one more run
            last = time.monotonic()
            try:
                self.fn()
            except Exception:  # noqa: BLE001 - the runner must outlive a failed run; beat retries
                logger.exception("nudged run of %s failed", self.thread.name)
            finally:
                connection.close()  # this thread's database connection back to the pool


class NudgeListener:
    def __init__(self, runs: dict[str, Callable[[], object]], *, gap_s: float | None = None):
        self.stop = threading.Event()
        self.gap_s = settings.SCRAPEJOBS_NUDGE_GAP_S if gap_s is None else gap_s
        self.runners = {
            kind: _Runner(kind.rsplit(":", 1)[-1], fn, self.stop, self.gap_s) for kind, fn in runs.items()
        }
        self.thread = threading.Thread(target=self._listen, name="nudge-listener", daemon=True)

    def start(self) -> NudgeListener:
        for runner in self.runners.values():
            runner.thread.start()
        self.thread.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        self.stop.set()
        for t in (self.thread, *(r.thread for r in self.runners.values())):
            t.join(timeout)

    def _listen(self) -> None:
        while not self.stop.is_set():
            try:
                got = state_redis().bzpopmin(NUDGES, timeout=BLOCK_S)
            except redis.RedisError:
                logger.warning("nudge listener cannot reach Redis; beat keeps things going", exc_info=True)
                self.stop.wait(BLOCK_S)
                continue
            if got and (runner := self.runners.get(str(got[1]))) is not None:
                runner.poke()
                # The set holds one nudge of a kind at most, so waiting a little before the next pop
                # loses nothing, and saves a round trip per receipt under a stream of them.
                self.stop.wait(self.gap_s / 2)


def _publish() -> object:
    from apps.publishing.tasks import outbox_publish  # noqa: PLC0415 - needs the app registry

    return outbox_publish()


def _flush() -> object:
    from apps.writer.tasks import writer_flush  # noqa: PLC0415 - needs the app registry

    return writer_flush()


_listener: tuple[int, NudgeListener] | None = None
# Reentrant: the stop runs in Celery's SIGTERM handler (worker_shutting_down), and a second signal
# during its join runs the handler again on the same thread; with a plain lock that second stop
# waited for ever on the lock the first one held (a control worker that never exited).
_lock = threading.RLock()


def nudge_listener_start() -> NudgeListener:
    """Start this process's listener (once; a forked child starts its own)."""
    global _listener
    with _lock:
        if _listener is None or _listener[0] != os.getpid():
            _listener = (os.getpid(), NudgeListener({PUBLISH: _publish, WRITER: _flush}).start())
        return _listener[1]


def nudge_listener_stop() -> None:
    """Stop this process's listener. Taken out before it is closed: a stop that comes while another
    closes it (a second signal) finds nothing to do and returns."""
    global _listener
    with _lock:
        listener, _listener = _listener, None
        if listener is not None and listener[0] == os.getpid():
            listener[1].close()
