"""Nudges: "run now" signals for the control process's outbox publisher and receipts writer.

Beat runs both every second; a nudge makes a job start, or a receipt land in the ledger, within
milliseconds instead. A nudge is one element in a Redis list that never holds more than one
(``LPUSH`` then ``LTRIM 0 0``), queued on the caller's own pipeline: no extra round trip and no
broker message (issue 7: a Celery task per nudge cost the scrape worker about a seventh of its
interpreter time and the control process one more task to receive and acknowledge each time).
The control process's listener (``scrapejobs/nudges.py``) takes the element with ``BLPOP`` and
runs the publisher or the writer at once, each in a thread of its own, so that however many
nudges arrive while one runs, one more run follows it. Best effort throughout: beat's ticks
remain the guarantee.
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from apps.jobs.redis import state_redis

logger = logging.getLogger(__name__)

PUBLISH = "sj:nudge:publish"  # run the outbox publisher (a job was accepted, a worker slot freed)
WRITER = "sj:nudge:writer"  # run the receipts writer (a receipt was appended)
KINDS = (PUBLISH, WRITER)


def nudges_queue(pipe: Any, *kinds: str) -> None:
    """Queue the nudges ``kinds`` on ``pipe`` (two commands each, executed with the caller's)."""
    for kind in kinds:
        pipe.lpush(kind, "1")
        pipe.ltrim(kind, 0, 0)


def nudge(*kinds: str) -> None:
    """Send the nudges ``kinds`` in one round trip; a Redis error is logged, never raised."""
    try:
        pipe = state_redis().pipeline(transaction=False)
        nudges_queue(pipe, *kinds)
        pipe.execute()
    except redis.RedisError:
        logger.warning("nudge %s failed; beat will run it", ", ".join(kinds), exc_info=True)
