"""How workers hand over their bookkeeping: ``receipt_submit`` (FR-W1).

A worker calls it after a fetch. It is one Redis round trip (XADD to the receipts stream, plus
the nudge's SET NX) and no database access at all: the leased writer (``apps.writer.services``)
applies receipts in batches, started by the nudge within milliseconds, or by beat's next tick.
"""

from __future__ import annotations

from apps.jobs.receipts import AttemptFinished, receipt_encode
from apps.writer.services import FIELD, NUDGE_KEY, NUDGE_MS, STREAM, writer_nudge, writer_redis


def receipt_submit(receipt: AttemptFinished) -> str:
    """Append the receipt (keyed by its natural key ``(job_id, attempt)``, so submitting it twice
    is harmless) and nudge the writer; returns its stream id. No trimming here: an entry leaves
    the stream only once the writer applied it (or moved it to the dead letters)."""
    pipe = writer_redis().pipeline(transaction=False)
    pipe.xadd(STREAM, {FIELD: receipt_encode(receipt)})
    # The nudge's coalescing key rides in the same round trip: only the first receipt of a burst
    # (or the first after a flush started reading) sends a flush task.
    pipe.set(NUDGE_KEY, "1", nx=True, px=NUDGE_MS)
    entry_id, first = pipe.execute()
    if first:
        writer_nudge(coalesce=False)
    return str(entry_id)
