"""Retention: stored results older than SCRAPEJOBS_RESULT_RETENTION_DAYS, and
bodies that never became a result, are deleted from storage in batches; final jobs and their
attempts are pruned after SCRAPEJOBS_JOB_RETENTION_DAYS when that is set.

Each batch is: pick rows (apps.jobs.retention), delete the objects (outside any transaction,
a few at a time in parallel: each is one request to S3), then record the deletions. Only deletes
that succeeded are recorded, so a storage that fails leaves its rows to the next run; a crash
between a delete and its record repeats a delete of a missing object, which both backends accept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from django.conf import settings

from apps.jobs.retention import (
    jobs_prune,
    orphan_bodies_due,
    orphan_bodies_mark_deleted,
    results_due_for_expiry,
    results_mark_expired,
)
from apps.results.locks import session_lock
from apps.results.storage import result_keys_ever, results_storage

logger = logging.getLogger(__name__)

# An orphan body is deleted only this long after its attempt ended: an upload given up at the
# job's deadline (timeout up to 300 s plus SCRAPEJOBS_STORAGE_ALLOWANCE_S, at most 3600 s) may
# still land until then, and deleting it before it lands would leave it for ever.
ORPHAN_GRACE = timedelta(hours=2)
# Parallel deletes per batch: S3 answers each in a few milliseconds to tens of them.
_DELETE_THREADS = 8

_Item = TypeVar("_Item")


@dataclass
class RetentionStats:
    results_deleted: int = 0
    orphans_deleted: int = 0
    jobs_pruned: int = 0
    delete_failures: int = 0
    busy: bool = False  # another pass was running: this one did nothing


def retention_run(*, now: datetime | None = None, budget_s: float = 240.0) -> RetentionStats:
    """One retention pass: expired results, then orphan bodies, then (when set) old jobs, each in
    batches of SCRAPEJOBS_RETENTION_BATCH_SIZE until none is left or ``budget_s`` is spent (the
    next run goes on from there)."""
    # One pass at a time: two would pick the same rows and delete every object twice.
    with session_lock("scrapejobs.retention") as taken:
        if not taken:
            return RetentionStats(busy=True)
        return _retention_pass(now=now or datetime.now(tz=UTC), budget_s=budget_s)


def _retention_pass(*, now: datetime, budget_s: float) -> RetentionStats:
    deadline = time.monotonic() + budget_s
    stats = RetentionStats()
    result_cutoff = now - timedelta(days=settings.SCRAPEJOBS_RESULT_RETENTION_DAYS)
    _in_batches(deadline, lambda limit: _expire_results(result_cutoff, limit, stats))
    _in_batches(deadline, lambda limit: _delete_orphans(now - ORPHAN_GRACE, limit, stats))
    if settings.SCRAPEJOBS_JOB_RETENTION_DAYS:
        # A job row outlives its result: its result is deleted first, so rows are pruned after
        # the longer of the two periods.
        days = max(settings.SCRAPEJOBS_JOB_RETENTION_DAYS, settings.SCRAPEJOBS_RESULT_RETENTION_DAYS)
        job_cutoff = now - timedelta(days=days)
        _in_batches(deadline, lambda limit: _prune_jobs(job_cutoff, limit, stats))
    if stats.results_deleted or stats.orphans_deleted or stats.jobs_pruned or stats.delete_failures:
        logger.info("retention: %s", stats)
    return stats


def _in_batches(deadline: float, batch: Callable[[int], tuple[int, int]]) -> None:
    """Run ``batch(limit)`` until it picks fewer rows than the limit, or makes no progress (every
    delete failed), or the deadline passed. One batch always runs: a pass whose budget an
    earlier step spent still moves every step on."""
    limit = settings.SCRAPEJOBS_RETENTION_BATCH_SIZE
    while True:
        picked, done = batch(limit)
        if picked < limit or done == 0 or time.monotonic() >= deadline:
            return


def _expire_results(cutoff: datetime, limit: int, stats: RetentionStats) -> tuple[int, int]:
    due = results_due_for_expiry(stored_before=cutoff, limit=limit)
    deleted = _delete_objects(due, keys_of=lambda item: [item[1]], stats=stats)
    results_mark_expired(job_ids=[job_id for job_id, _ in deleted])
    stats.results_deleted += len(deleted)
    return len(due), len(deleted)


def _delete_orphans(cutoff: datetime, limit: int, stats: RetentionStats) -> tuple[int, int]:
    due = orphan_bodies_due(finished_before=cutoff, limit=limit)
    deleted = _delete_objects(
        due, keys_of=lambda item: result_keys_ever(job_id=item[1], attempt=item[2]), stats=stats
    )
    orphan_bodies_mark_deleted(attempt_ids=[attempt_id for attempt_id, _, _ in deleted])
    stats.orphans_deleted += len(deleted)
    return len(due), len(deleted)


def _prune_jobs(cutoff: datetime, limit: int, stats: RetentionStats) -> tuple[int, int]:
    pruned = jobs_prune(finished_before=cutoff, limit=limit)
    stats.jobs_pruned += pruned
    return pruned, pruned


def _delete_objects(
    items: Sequence[_Item], *, keys_of: Callable[[_Item], list[str]], stats: RetentionStats
) -> list[_Item]:
    """Delete each item's objects; returns the items whose deletes all succeeded (a missing
    object counts as deleted)."""
    if not items:
        return []
    storage = results_storage()

    def delete(item: _Item) -> bool:
        for key in keys_of(item):
            try:
                storage.delete(key)
            except Exception:  # noqa: BLE001 - any backend's failure: left for the next run
                logger.warning("retention could not delete %s", key, exc_info=True)
                return False
        return True

    with ThreadPoolExecutor(max_workers=min(_DELETE_THREADS, len(items))) as pool:
        done = list(pool.map(delete, items))
    stats.delete_failures += done.count(False)
    return [item for item, ok in zip(items, done, strict=True) if ok]
