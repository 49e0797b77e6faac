"""How workers hand over their bookkeeping: ``receipt_submit`` (FR-W1).

A worker calls it after a fetch. It is one XADD to the receipts stream and no database access at
all: the leased writer (``apps.writer.services``) applies receipts in batches later.
"""

from __future__ import annotations

import json

from apps.jobs.receipts import AttemptFinished
from apps.jobs.redis import state_redis
from apps.writer.services import FIELD, STREAM


def receipt_submit(receipt: AttemptFinished) -> str:
    """Append the receipt (keyed by its natural key ``(job_id, attempt)``, so submitting it twice
    is harmless); returns its stream id. No trimming here: an entry leaves the stream only once
    the writer applied it (or moved it to the dead letters)."""
    return str(state_redis().xadd(STREAM, {FIELD: json.dumps(receipt.to_dict(), separators=(",", ":"))}))
