"""Keeping the leases of running attempts alive: one thread per worker process renews them all.

A fetch may wait up to its timeout (300 s at most) for a single byte, longer than a lease, so the
renewal cannot wait for the fetch loop; and one thread for every fetch would also mean one database
connection each. One keeper thread wakes every SCRAPEJOBS_LEASE_S / 3 and renews every lease
this process holds with one statement (``jobs_renew_leases``). A renewal that is refused (the job was taken again by
a newer attempt after our lease expired, or it ended) marks the handle ``lost``; the fetch checks
that between chunks and stops.

A fetch can also sit inside one read for minutes (a target slow to send its headers), where no
check between chunks runs. So a second thread, the watcher, asks Redis every
``CANCEL_WATCH_INTERVAL_S`` for the cancel flags of every held job in one round trip; for a
cancelled job it marks the handle ``cancelled`` and fires the fetch's ``FetchInterrupt``, which
shuts its socket down: the read ends at once and the fetch's check reports the cancel. A lost
lease fires the interrupt the same way. (The watcher is a thread of its own so that a slow
database under the renewals never delays a cancel.)

A lease is renewed only while its attempt can still be making progress: until the job's
``timeout_s`` (which bounds the fetch) plus ``SCRAPEJOBS_STORAGE_ALLOWANCE_S`` (which bounds the
upload) have passed since the attempt began. An attempt still held after that is stuck where no
bound reaches; its lease runs out and the sweeper records the attempt lost and moves the job on.

The watcher also keeps every held lease in Redis (``lease_mark_key``: the attempt number,
expiring ``SCRAPEJOBS_LEASE_S`` after it was written), rewritten every
``SCRAPEJOBS_LEASE_S / 3`` in the same round trip as the cancel flags. When PostgreSQL is
away the keeper's renewals fail (a pooled connection may even wait 30 s for the pool), and the
leases in the database run out although the worker is alive and fetching; the mark says so, and
the sweeper leaves a job with a live mark alone (apps.scheduling.services). When the database
is back the keeper renews the lease there at its next tick. A dead worker's marks lapse within a
lease, as its leases do (NFR-4).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection

from apps.jobs.claims import jobs_renew_leases
from apps.outbound.interrupt import FetchInterrupt
from apps.redis_clients import cancel_flag_key, lease_mark_key, state_redis

logger = logging.getLogger(__name__)

# How long a cancel may wait, at most, before a fetch blocked in a read is broken off.
CANCEL_WATCH_INTERVAL_S = 0.5


@dataclass(eq=False)
class LeaseHandle:
    job_id: uuid.UUID
    attempt: int
    worker: str
    # time.monotonic() after which the lease is no longer renewed (None: no limit). An attempt
    # past its job's timeout plus the storage allowance is stuck somewhere nothing bounds (a
    # stalled disk, a storage client that never connects); renewing its lease would keep the job
    # `running` for ever, so the keeper lets it expire and the sweeper takes the job back.
    renew_until: float | None = None
    lost: threading.Event = field(default_factory=threading.Event)
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Given to the fetch (fetch_open(interrupt=...)); fired on a cancel or a lost lease.
    interrupt: FetchInterrupt = field(default_factory=FetchInterrupt)
    overdue: bool = False  # past renew_until (logged once)
    marked_at: float | None = None  # monotonic time its lease mark was last written to Redis

    def renewable(self, now: float) -> bool:
        """Still within its deadline: its lease (database) and its mark (Redis) are kept."""
        return self.renew_until is None or now <= self.renew_until


class LeaseKeeper:
    def __init__(self, *, interval_s: float, watch_interval_s: float = CANCEL_WATCH_INTERVAL_S):
        self.interval_s = interval_s
        self.watch_interval_s = watch_interval_s
        self._held: set[LeaseHandle] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._watcher: threading.Thread | None = None

    @contextmanager
    def hold(
        self, *, job_id: uuid.UUID, attempt: int, worker: str, renew_until: float | None = None
    ) -> Iterator[LeaseHandle]:
        handle = LeaseHandle(job_id=job_id, attempt=attempt, worker=worker, renew_until=renew_until)
        with self._lock:
            self._held.add(handle)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
                self._thread.start()
            if self._watcher is None or not self._watcher.is_alive():
                self._watcher = threading.Thread(target=self._watch, name="cancel-watcher", daemon=True)
                self._watcher.start()
        try:
            yield handle
        finally:
            with self._lock:
                self._held.discard(handle)

    def renew_all(self) -> None:
        now = time.monotonic()
        with self._lock:
            held = [h for h in self._held if h.renewable(now)]
            overdue = [h for h in self._held if not h.renewable(now)]
        for handle in overdue:
            if not handle.overdue:
                handle.overdue = True
                logger.warning(
                    "attempt %s of job %s is past its deadline and storage allowance: its lease is "
                    "no longer renewed",
                    handle.attempt,
                    handle.job_id,
                )
        if not held:
            return
        try:
            renewed = jobs_renew_leases(leases=[(h.job_id, h.attempt, h.worker) for h in held])
        except Exception:  # noqa: BLE001 - the database may be down; keep the fetches, retry next tick
            logger.warning("renewing %d leases failed", len(held), exc_info=True)
            return
        for handle in held:
            if (str(handle.job_id), handle.attempt) not in renewed:
                handle.lost.set()  # before the fire: the stopped fetch's check reads it
                handle.interrupt.fire()

    def watch_all(self) -> None:
        """Stop the fetches of held jobs whose cancel flag is set, and write the lease marks that
        are due (new handles, and every ``interval_s``): one Redis round trip for all."""
        with self._lock:
            held = [h for h in self._held if not (h.cancelled.is_set() or h.lost.is_set())]
        if not held:
            return
        now = time.monotonic()
        # The mark, like the lease, stops for an attempt past its deadline (renew_until): a stuck
        # attempt's mark must lapse so that the sweeper takes the job back.
        due = [
            h
            for h in held
            if (h.marked_at is None or now - h.marked_at >= self.interval_s) and h.renewable(now)
        ]
        pipe = state_redis().pipeline(transaction=False)
        for handle in held:
            pipe.exists(cancel_flag_key(str(handle.job_id), handle.attempt))
        ttl_ms = int(settings.SCRAPEJOBS_LEASE_S * 1000)
        for handle in due:
            pipe.set(lease_mark_key(str(handle.job_id)), handle.attempt, px=ttl_ms)
        try:
            flags = pipe.execute()[: len(held)]
        except Exception:  # noqa: BLE001 - Redis down: a later tick sees the cancel
            logger.warning("cancel watch failed", exc_info=True)
            return
        for handle in due:
            handle.marked_at = now
        for handle, flagged in zip(held, flags, strict=True):
            if flagged:
                handle.cancelled.set()  # before the fire: the stopped fetch's check reads it
                handle.interrupt.fire()

    def _run(self) -> None:
        stop = threading.Event()  # never set: the thread lives as long as the process
        while not stop.wait(self.interval_s):
            try:
                self.renew_all()
            finally:
                # Give this thread's connection back (to the pool) between ticks.
                connection.close()

    def _watch(self) -> None:
        stop = threading.Event()  # never set, as in _run
        while not stop.wait(self.watch_interval_s):
            try:
                self.watch_all()
            except Exception:  # noqa: BLE001 - never let the watcher die
                logger.exception("cancel watcher tick failed")


_keeper: tuple[int, LeaseKeeper] | None = None
_keeper_lock = threading.Lock()


def lease_keeper() -> LeaseKeeper:
    """The process's keeper (a forked child gets its own: threads do not survive fork)."""
    global _keeper
    with _keeper_lock:
        if _keeper is None or _keeper[0] != os.getpid():
            _keeper = (os.getpid(), LeaseKeeper(interval_s=settings.SCRAPEJOBS_LEASE_S / 3))
        return _keeper[1]
