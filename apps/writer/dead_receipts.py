"""Dead receipts: receipts the writer could not apply, set aside (FR-W4).

A receipt that failed ``MAX_ATTEMPTS`` times, or that cannot even be decoded, is moved by the
flush (``apps.writer.flush``) to the stream ``DEAD_RECEIPTS`` with its error, and acknowledged,
so that it never holds the writer back. Operators see them on the writer's admin page and replay
(after fixing the cause) or drop them, one, selected or all. (The stream's cap keeps the name of
its setting, ``SCRAPEJOBS_DATABASE_WRITER_DEAD_LETTER_MAXLEN``: deployments set it.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.utils import timezone

from apps.jobs.receipts import receipt_decode
from apps.writer.streams import (
    DEAD_RECEIPTS,
    FIELD,
    GROUP,
    RETRY_AT,
    STREAM,
    SUBMIT,
    TOTALS,
    TRIES,
    WAITING,
    waiting_field,
    writer_redis,
)


def dead_receipt_add(
    r: Any, *, entry_id: str, raw: str, error: str, attempts: int, waiting: str | None = None
) -> None:
    """Move one entry from the receipts stream to the dead receipts, with its error, in one
    MULTI: it is in exactly one of the two streams, and no longer pending or scheduled.
    ``waiting``: its field in ``WAITING`` (none for a receipt that cannot be decoded), removed
    too, so the sweeper treats its job by its lease again."""
    fields = {
        FIELD: raw,
        "error": error[:4000],
        "stream_id": entry_id,
        "attempts": str(attempts),
        "failed_at": timezone.now().isoformat(),
    }
    pipe = r.pipeline(transaction=True)
    pipe.xadd(
        DEAD_RECEIPTS, fields, maxlen=settings.SCRAPEJOBS_DATABASE_WRITER_DEAD_LETTER_MAXLEN, approximate=True
    )
    pipe.xack(STREAM, GROUP, entry_id).xdel(STREAM, entry_id).zrem(RETRY_AT, entry_id).hdel(TRIES, entry_id)
    if waiting is not None:
        pipe.hdel(WAITING, waiting)
    pipe.hincrby(TOTALS, "dead", 1)
    pipe.execute()


def dead_receipts_replay(*, ids: Iterable[str] | None = None) -> int:
    """Append dead receipts back to the receipts stream (as new entries, with a fresh failure
    count) and remove them from the dead receipts. ``ids=None``: all of them. Returns how many."""
    r = writer_redis()
    replayed = 0
    for batch in _dead_receipt_batches(r, ids):
        pipe = r.pipeline(transaction=True)
        for entry_id, fields in batch:
            raw = fields.get(FIELD, "")
            try:
                receipt = receipt_decode(raw)
            except (ValueError, TypeError, KeyError):
                pipe.xadd(STREAM, {FIELD: raw})  # undecodable: it comes straight back here
            else:  # waiting again, as when its worker submitted it (apps.writer.submit)
                pipe.eval(
                    SUBMIT, 2, STREAM, WAITING, FIELD, raw, waiting_field(receipt.job_id, receipt.attempt)
                )
            pipe.xdel(DEAD_RECEIPTS, entry_id)
        pipe.execute()
        replayed += len(batch)
    return replayed


def dead_receipts_drop(*, ids: Iterable[str] | None = None) -> int:
    """Delete dead receipts for good. ``ids=None``: all of them. Returns how many."""
    r = writer_redis()
    dropped = 0
    for batch in _dead_receipt_batches(r, ids):
        dropped += int(r.xdel(DEAD_RECEIPTS, *[entry_id for entry_id, _ in batch]))
    return dropped


def _dead_receipt_batches(
    r: Any, ids: Iterable[str] | None, size: int = 500
) -> Iterable[list[tuple[str, dict[str, str]]]]:
    if ids is None:
        start = "-"
        while batch := r.xrange(DEAD_RECEIPTS, min=start, count=size):
            yield batch
            start = "(" + batch[-1][0]
        return
    wanted = list(dict.fromkeys(ids))
    for i in range(0, len(wanted), size):
        pipe = r.pipeline(transaction=False)
        for entry_id in wanted[i : i + size]:
            pipe.xrange(DEAD_RECEIPTS, min=entry_id, max=entry_id)
        found = [hit[0] for hit in pipe.execute() if hit]
        if found:
            yield found


def dead_receipts_drop_of_jobs(*, job_ids: Iterable[str]) -> int:
    """Erasure (FR-52): drop the dead receipts of these jobs (a receipt holds the job's error
    text and its answer's URL and headers). The stream is capped, so reading it whole is bounded.
    Returns how many were dropped."""
    wanted = {str(j) for j in job_ids}
    if not wanted:
        return 0
    r = writer_redis()
    doomed = []
    for batch in _dead_receipt_batches(r, None):
        for entry_id, fields in batch:
            try:
                receipt = receipt_decode(fields.get(FIELD, ""))
            except (ValueError, TypeError, KeyError):
                continue
            if str(receipt.job_id) in wanted:
                doomed.append(entry_id)
    return dead_receipts_drop(ids=doomed) if doomed else 0
