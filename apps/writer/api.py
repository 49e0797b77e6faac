"""How workers hand over their bookkeeping: ``receipt_submit`` (FR-W1).

A worker calls it after a fetch. It is one Redis round trip (XADD to the receipts stream, plus
the nudges' SET NX, plus whatever the caller adds to the same pipeline, e.g. giving back its
domain's concurrency slot) and no database access at all: the leased writer
(``apps.writer.services``) applies receipts in batches, started by the nudge within milliseconds,
or by beat's next tick.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from apps.jobs.receipts import AttemptFinished
from apps.jobs.redis import PUBLISH_NUDGE_KEY, PUBLISH_NUDGE_MS
from apps.jobs.services import publisher_nudge_send
from apps.writer.services import FIELD, NUDGE_KEY, NUDGE_MS, STREAM, writer_nudge, writer_redis


def receipt_submit(
    receipt: AttemptFinished,
    *,
    also: Callable[[Any], None] | None = None,
    nudge_publisher: bool = False,
) -> str:
    """Append the receipt (keyed by its natural key ``(job_id, attempt)``, so submitting it twice
    is harmless) and nudge the writer; returns its stream id. No trimming here: an entry leaves
    the stream only once the writer applied it (or moved it to the dead letters).

    ``also`` queues the caller's own commands on the same pipeline (they run first).
    ``nudge_publisher``: a worker slot is free, so ask the publisher to refill the broker (the
    coalescing SET NX of ``publisher_nudge`` rides in the same round trip)."""
    pipe = writer_redis().pipeline(transaction=False)
    if also is not None:
        also(pipe)
    head = len(pipe)
    pipe.xadd(STREAM, {FIELD: json.dumps(receipt.to_dict(), separators=(",", ":"))})
    # The nudge's coalescing key rides in the same round trip: only the first receipt of a burst
    # (or the first after a flush started reading) sends a flush task.
    pipe.set(NUDGE_KEY, "1", nx=True, px=NUDGE_MS)
    if nudge_publisher:
        pipe.set(PUBLISH_NUDGE_KEY, "1", nx=True, px=PUBLISH_NUDGE_MS)
    replies = pipe.execute()[head:]
    entry_id, first = replies[0], replies[1]
    if first:
        writer_nudge(coalesce=False)
    if nudge_publisher and replies[2]:
        publisher_nudge_send()
    return str(entry_id)
