"""Backlog caps per tenant (FR-20, docs/limits.md): how many queued jobs, and how many batches
received but not yet loaded, one tenant may hold, so that one tenant cannot fill the ledger and
the disk. Past a cap a submission is refused whole with ``429`` and ``Retry-After``.

A plain ``POST /jobs`` must not pay a count per job (NFR-2): each web process keeps, per tenant,
the last count of its queued jobs and adds what it accepted since; it counts again (one bounded
index walk, ``tenant_queued_count``) once that is ``SCRAPEJOBS_TENANT_BACKLOG_RECOUNT_S`` old. So
the cap holds exactly within one process, and other web processes' accepts within that window
may take a tenant past it by that much. A batch is checked on fresh counts, under a lock per
tenant (apps/batches/services.py), because a batch is a lot of rows at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from apps.jobs.selectors import tenant_queued_count

TENANT_BACKLOG_FULL = "tenant_backlog_full"
TENANT_BATCHES_FULL = "tenant_batches_full"


class BacklogFull(Exception):
    """A submission that does not fit in the tenant's backlog: ``code`` says which cap."""

    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code = code
        self.detail = detail

    @property
    def retry_after_s(self) -> int:
        return settings.SCRAPEJOBS_TENANT_BACKLOG_RETRY_AFTER_S


def tenant_queued_cap(tenant: Any) -> int:
    """The tenant's cap on queued jobs (0: none): its own, else the service's."""
    own = getattr(tenant, "max_queued_jobs", None)
    return settings.SCRAPEJOBS_TENANT_MAX_QUEUED_JOBS if own is None else int(own)


def tenant_batches_cap(tenant: Any) -> int:
    """The tenant's cap on batches in progress (0: none): its own, else the service's."""
    own = getattr(tenant, "max_batches_in_progress", None)
    return settings.SCRAPEJOBS_TENANT_MAX_BATCHES_IN_PROGRESS if own is None else int(own)


def backlog_full(*, queued: int, adding: int, cap: int) -> BacklogFull:
    return BacklogFull(
        TENANT_BACKLOG_FULL,
        f"This tenant has {queued} queued jobs and may have at most {cap}; {adding} more do not fit. "
        "Submit again once some have run.",
    )


@dataclass
class _Count:
    at: float  # monotonic time of the last count in the database
    queued: int  # that count, plus the jobs accepted here since
    inflight: int = 0  # taken here, not yet committed (not seen by a count)
    counting: bool = False  # a request is counting in the database right now
    taken: int = 0  # room taken here (less what was given back), ever


_counts: dict[str, _Count] = {}
_counts_lock = threading.Lock()
_tenant_locks: dict[str, threading.Lock] = {}


def _tenant_lock(key: str) -> threading.Lock:
    with _counts_lock:
        lock = _tenant_locks.get(key)
        if lock is None:
            if len(_tenant_locks) > 100_000:
                _tenant_locks.clear()
            lock = _tenant_locks[key] = threading.Lock()
        return lock


def tenant_job_room_take(*, tenant: Any) -> None:
    """Take room for one job in the tenant's backlog, or raise ``BacklogFull``; the caller then
    calls ``tenant_job_room_done`` once the job is written (or not).

    Counts in the database once SCRAPEJOBS_TENANT_BACKLOG_RECOUNT_S have passed, when the tenant
    may be near its cap (its last count and what was accepted here since reach half of it), and
    at least every 12 windows otherwise; a count of a large backlog is not cheap, so one request
    counts, outside the tenant's lock, while the others go on with the last figure. The jobs this
    process is still writing are added to a count (it cannot see them yet)."""
    cap = tenant_queued_cap(tenant)
    if cap <= 0:
        return
    key = str(tenant.id)
    lock = _tenant_lock(key)
    window = settings.SCRAPEJOBS_TENANT_BACKLOG_RECOUNT_S
    with lock:
        held = _counts.get(key)
        if held is None:  # this process's first job of the tenant: count, the others wait
            held = _counts[key] = _Count(
                at=time.monotonic(), queued=tenant_queued_count(tenant_id=tenant.id, at_most=cap)
            )
        now = time.monotonic()
        due = (
            not held.counting
            and now - held.at >= window
            and (held.queued * 2 >= cap or now - held.at >= 12 * window)
        )
        if due:
            held.counting = True
            start = (held.inflight, held.taken)
    if due:
        try:
            counted = tenant_queued_count(tenant_id=tenant.id, at_most=cap)
        finally:
            with lock:
                held.counting = False
        with lock:
            # What was being written when the count began, and what was taken since, may be
            # missing from it: added (a job that committed just before the count's snapshot is
            # then counted twice, which errs on the safe side).
            held.at = now
            held.queued = counted + start[0] + (held.taken - start[1])
    # One check-and-take at a time per tenant, so two requests never both take the last place.
    with lock:
        if held.queued >= cap:
            raise backlog_full(queued=held.queued, adding=1, cap=cap)
        held.queued += 1
        held.inflight += 1
        held.taken += 1


def tenant_job_room_done(*, tenant: Any, created: bool) -> None:
    """The job that took room is written (``created``), or nothing new was (an idempotent replay,
    a refusal, a failure): then its room goes back."""
    if tenant_queued_cap(tenant) <= 0:
        return
    key = str(tenant.id)
    with _tenant_lock(key):
        held = _counts.get(key)
        if held is not None:
            held.inflight = max(0, held.inflight - 1)
            if not created:
                held.queued = max(0, held.queued - 1)
                held.taken -= 1


def tenant_backlog_counts_clear() -> None:
    """Forget every count (tests)."""
    with _counts_lock:
        _counts.clear()
        _tenant_locks.clear()
