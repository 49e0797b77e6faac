"""The worker side of the writer: ``receipt_submit`` hands over a worker's bookkeeping (FR-W1).

A worker calls it after a fetch. It is one Redis round trip (XADD to the receipts stream, plus
the nudges, plus whatever the caller adds to the same pipeline, e.g. giving back its
domain's concurrency slot) and no database access at all: the leased writer
(``apps.writer.flush``) applies receipts in batches, started by the nudge within milliseconds,
or by beat's next tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from apps.jobs.nudges import PUBLISH, WRITER, nudges_queue
from apps.jobs.receipts import AttemptFinished, receipt_encode
from apps.writer.streams import FIELD, STREAM, SUBMIT, WAITING, waiting_field, writer_redis

logger = logging.getLogger(__name__)


def receipt_submit(
    receipt: AttemptFinished,
    *,
    also: Callable[[Any], None] | None = None,
    nudge_publisher: bool = False,
) -> str:
    """Append the receipt (keyed by its natural key ``(job_id, attempt)``, so submitting it twice
    is harmless), note it as waiting for its job (``WAITING``) and nudge the writer; returns its
    stream id. No trimming here: an entry leaves the stream only once the writer applied it (or
    moved it to the dead receipts).

    ``also`` queues the caller's own commands on the same pipeline (they run first). A reply of
    theirs that is an error is logged, not raised: the receipt is in, and what the caller added
    (a slot's release, an answer for the adaptive rate) has its own fallback; an error of the
    receipt's own commands is raised.
    ``nudge_publisher``: a worker slot is free, so ask the publisher to refill the broker too.
    The nudges (apps.jobs.nudges) ride in the same round trip."""
    pipe = writer_redis().pipeline(transaction=False)
    if also is not None:
        also(pipe)
    head = len(pipe)
    # XADD, and the receipt's entry in WAITING: until the writer applies it, the sweeper leaves
    # its job alone however long ago its lease ran out (apps.writer.streams.SUBMIT).
    pipe.eval(
        SUBMIT,
        2,
        STREAM,
        WAITING,
        FIELD,
        receipt_encode(receipt),
        waiting_field(receipt.job_id, receipt.attempt),
    )
    nudges_queue(pipe, *((WRITER, PUBLISH) if nudge_publisher else (WRITER,)))
    replies = pipe.execute(raise_on_error=False)
    for reply in replies[head:]:
        if isinstance(reply, Exception):
            raise reply
    for reply in replies[:head]:
        if isinstance(reply, Exception):
            logger.warning("a command sent with receipt %s failed: %s", receipt.job_id, reply)
    return str(replies[head])
