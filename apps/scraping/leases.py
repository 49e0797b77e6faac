"""Keeping the leases of running attempts alive: one thread per worker process renews them all.

A fetch may wait up to its timeout (300 s at most) for a single byte, longer than a lease, so the
renewal cannot wait for the fetch loop; and one thread for every fetch would also mean one database
connection each. One keeper thread wakes every SCRAPEJOBS_LEASE_SECONDS / 3 and renews every lease
this process holds with ``job_renew_lease``. A renewal that is refused (the job was taken again by
a newer attempt after our lease expired, or it ended) marks the handle ``lost``; the fetch checks
that between chunks and stops.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection

from apps.jobs.services import job_renew_lease

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class LeaseHandle:
    job_id: uuid.UUID
    attempt: int
    worker: str
    lost: threading.Event = field(default_factory=threading.Event)


class LeaseKeeper:
    def __init__(self, *, interval_s: float):
        self.interval_s = interval_s
        self._held: set[LeaseHandle] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextmanager
    def hold(self, *, job_id: uuid.UUID, attempt: int, worker: str) -> Iterator[LeaseHandle]:
        handle = LeaseHandle(job_id=job_id, attempt=attempt, worker=worker)
        with self._lock:
            self._held.add(handle)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
                self._thread.start()
        try:
            yield handle
        finally:
            with self._lock:
                self._held.discard(handle)

    def renew_all(self) -> None:
        with self._lock:
            held = list(self._held)
        for handle in held:
            try:
                if not job_renew_lease(job_id=handle.job_id, attempt=handle.attempt, worker=handle.worker):
                    handle.lost.set()
            except Exception:  # noqa: BLE001 - the database may be down; keep the fetch, retry next tick
                logger.warning("lease renewal of %s failed", handle.job_id, exc_info=True)

    def _run(self) -> None:
        stop = threading.Event()  # never set: the thread lives as long as the process
        while not stop.wait(self.interval_s):
            try:
                self.renew_all()
            finally:
                # Give this thread's connection back (to the pool) between ticks.
                connection.close()


_keeper: tuple[int, LeaseKeeper] | None = None
_keeper_lock = threading.Lock()


def lease_keeper() -> LeaseKeeper:
    """The process's keeper (a forked child gets its own: threads do not survive fork)."""
    global _keeper
    with _keeper_lock:
        if _keeper is None or _keeper[0] != os.getpid():
            _keeper = (os.getpid(), LeaseKeeper(interval_s=settings.SCRAPEJOBS_LEASE_SECONDS / 3))
        return _keeper[1]
