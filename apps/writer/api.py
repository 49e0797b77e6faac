"""How workers hand over their bookkeeping: ``receipt_submit``.

Issue #2 applies the receipt straight away; issue #3 replaces the body with an XADD to the
receipts stream, drained by the leased batching writer. Callers do not change.
"""

from __future__ import annotations

from apps.jobs.receipts import AttemptFinished
from apps.jobs.services import attempts_apply_finished


def receipt_submit(receipt: AttemptFinished) -> None:
    attempts_apply_finished([receipt])
