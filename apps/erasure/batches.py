"""A batch's erasure (FR-53, docs/erasure.md), run by beat's ``batches-erase``: the batch's jobs
in chunks of SCRAPEJOBS_ERASURE_CHUNK_SIZE rows, in row order, then the batch's own objects.

Each chunk: read the next rows past the batch's ``erase_after_row``, erase them (objects, then
tombstones: apps.erasure.services), then advance ``erase_after_row`` by a conditional UPDATE on
the row the chunk started from. Two runners at once (the advisory lock makes that rare) repeat
each other's deletes, which are idempotent, and the row moves once. A chunk whose job could not be
erased (the storage refused a delete; a job requeued since the request) advances only to the row
before it: the next run starts there.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from django.conf import settings

from apps.batches.selectors import batches_erase_pending
from apps.erasure.services import jobs_erase_ids
from apps.jobs.erasure import batch_jobs_after
from apps.results.locks import session_lock

logger = logging.getLogger(__name__)


@dataclass
class BatchErasureStats:
    batches_finished: int = 0
    jobs_erased: int = 0
    chunks: int = 0
    stuck: int = 0  # chunks that stopped at a job that could not be erased yet
    busy: bool = False


def batches_erase_run(*, budget_s: float = 50.0) -> BatchErasureStats:
    """Erase chunks of the batches asked for until none is left or ``budget_s`` is spent."""
    with session_lock("scrapejobs.erasure.batches") as taken:
        if not taken:
            return BatchErasureStats(busy=True)
        stats = BatchErasureStats()
        deadline = time.monotonic() + budget_s
        for batch_id, after_row in batches_erase_pending():
            # One chunk at least per run: a run whose budget is spent still moves the batch on.
            more = True
            while more:
                after_row, more = _erase_chunk(batch_id, after_row, stats)
                more = more and time.monotonic() < deadline
            if time.monotonic() >= deadline:
                break
        if stats.chunks:
            logger.info("batch erasure: %s", stats)
        return stats


def _erase_chunk(batch_id: uuid.UUID, after_row: int, stats: BatchErasureStats) -> tuple[int, bool]:
    """One chunk; returns (the row erased up to, whether to go on with this batch now)."""
    # apps/batches/services.py brings pyarrow and DRF's serializers: imported by a run that has a
    # batch to erase, not by the control process's every-ten-seconds run that finds none (NFR-42).
    from apps.batches.services import batch_erase_advance, batch_erase_finish  # noqa: PLC0415 - see above

    rows = batch_jobs_after(
        batch_id=batch_id, after_row=after_row, limit=settings.SCRAPEJOBS_ERASURE_CHUNK_SIZE
    )
    if not rows:
        batch_erase_finish(batch_id=batch_id)
        stats.batches_finished += 1
        return after_row, False
    stats.chunks += 1
    erased = jobs_erase_ids(job_ids=[job_id for job_id, _ in rows])
    stats.jobs_erased += erased.jobs_erased
    blocked = set(erased.not_final) | set(erased.storage_failures)
    upto = after_row
    for job_id, row in rows:
        if job_id in blocked:
            break
        upto = row
    if upto > after_row and not batch_erase_advance(batch_id=batch_id, from_row=after_row, to_row=upto):
        return upto, False  # another runner moved it: leave the batch to it
    if blocked:
        stats.stuck += 1
        return upto, False
    return upto, True
