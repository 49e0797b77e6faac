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
import uuid
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


# tenant id → (monotonic time of the count, queued jobs then plus those accepted here since)
_counts: dict[str, tuple[float, int]] = {}
_counts_lock = threading.Lock()


def tenant_job_room_take(*, tenant: Any) -> None:
    """Take room for one job in the tenant's backlog, or raise ``BacklogFull``. Counts in the
    database at most once per SCRAPEJOBS_TENANT_BACKLOG_RECOUNT_S per tenant and process."""
    cap = tenant_queued_cap(tenant)
    if cap <= 0:
        return
    key = str(tenant.id)
    now = time.monotonic()
    with _counts_lock:
        seen = _counts.get(key)
    fresh = None
    if seen is None or now - seen[0] >= settings.SCRAPEJOBS_TENANT_BACKLOG_RECOUNT_S:
        fresh = (now, tenant_queued_count(tenant_id=tenant.id, at_most=cap))  # outside the lock
    # The check and the taking are one step under the lock: two requests at once never both
    # take the last place. A count made by another thread meanwhile is as good as ours.
    with _counts_lock:
        seen = _counts.get(key)
        if fresh is not None and (seen is None or seen[0] < fresh[0]):
            seen = fresh
        assert seen is not None
        at, queued = seen
        if queued >= cap:
            _counts[key] = (at, queued)
            raise backlog_full(queued=queued, adding=1, cap=cap)
        _counts[key] = (at, queued + 1)


def tenant_job_room_give_back(*, tenant_id: uuid.UUID | str) -> None:
    """An accepted job that created nothing (an idempotent replay) gives its room back."""
    with _counts_lock:
        seen = _counts.get(str(tenant_id))
        if seen is not None:
            _counts[str(tenant_id)] = (seen[0], max(0, seen[1] - 1))


def tenant_backlog_counts_clear() -> None:
    """Forget every count (tests)."""
    with _counts_lock:
        _counts.clear()
