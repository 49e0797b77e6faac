"""The writer's Redis keys, its consumer name and its stream helpers (FR-W1 to FR-W4, FR-W1).

Workers append receipts to ``STREAM`` (``apps.writer.submit``); the flush (``apps.writer.flush``)
reads them in the consumer group ``GROUP``, and sets the poisoned ones aside in ``DEAD_RECEIPTS``
(``apps.writer.dead_receipts``). The key strings are data in running deployments: they keep their
values whatever the Python names around them are called.
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass, field
from typing import Any

import redis

from apps.jobs.receipts import AttemptFinished
from apps.redis_clients import state_redis

STREAM = "sj:receipts"
GROUP = "writer"
DEAD_RECEIPTS = "sj:receipts:dead"  # stream: poisoned receipts (apps.writer.dead_receipts)
LEASE_KEY = "sj:writer:lease"
TRIES = "sj:writer:tries"  # hash: stream id -> failed applications so far
RETRY_AT = "sj:writer:retry"  # sorted set: stream id -> ms (Unix) of its next try
BATCHES = "sj:writer:batches"  # list: the last BATCH_RECORDS transactions (JSON), newest first
TOTALS = "sj:writer:totals"  # hash: running counters since the Redis database was created
BATCH_RECORDS = 50
WANTED_KEY = "sj:writer:wanted"  # a flush found the lease taken: the holder drains once more
FIELD = "r"  # the one field of a stream entry: the receipt (apps.jobs.receipts.receipt_encode)
# hash: "<job id>:<attempt>" -> stream id, for every receipt in STREAM. Written
# with the receipt (``SUBMIT``), removed with it when applied or set aside; the sweeper asks it
# whether a job whose lease ran out has its receipt waiting (apps.writer.selectors).
WAITING = "sj:receipts:waiting"

# XADD and the WAITING entry in one script, so the entry names the receipt's stream id and a
# writer can never apply the receipt between the two. EVAL, not EVALSHA through a redis-py Script:
# in a pipeline a Script adds a SCRIPT EXISTS round trip to every execute.
SUBMIT = """
local id = redis.call('XADD', KEYS[1], '*', ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[3], id)
return id
"""


def waiting_field(job_id: str, attempt: int) -> str:
    return f"{job_id}:{attempt}"


def writer_redis() -> Any:
    """The state Redis client, typed loosely: redis-py 8 annotates every reply as a union of
    bytes, str and awaitables, which ``decode_responses=True`` and the sync client rule out."""
    return state_redis()


# One consumer name per process: XAUTOCLAIM moves a dead process's pending entries to the living.
CONSUMER = f"{socket.gethostname()}:{os.getpid()}"


@dataclass(slots=True)
class Entry:
    id: str
    raw: str
    receipt: AttemptFinished
    duplicates: list[str] = field(default_factory=list)  # stream ids acknowledged with this one
    # Some of its ids came from a retry or a reclaim (XCLAIM, XAUTOCLAIM), so they may have a
    # failure count and a retry time to clear. A new receipt (XREADGROUP ">") never has them.
    swept: bool = False
    # Taken off the retry schedule (it failed before): applied alone (apps.writer.appliers).
    retried: bool = False

    @property
    def ids(self) -> list[str]:
        return [self.id, *self.duplicates] if self.duplicates else [self.id]


def stream_group_ensure(r: Any) -> None:
    # Idempotent; from id 0 so that receipts appended before the group existed are read too.
    try:
        r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def stream_read_new(r: Any, *, count: int) -> list[tuple[str, list[str]]]:
    """XREADGROUP ``>``: up to ``count`` receipts never delivered before, as (id, flat fields).

    Sent without redis-py's reply callback, which turns every entry's fields into a dict (and a
    RESP3 reply into the RESP2 shape): a few microseconds per receipt on the writer's busiest
    thread. Both reply shapes are read here: RESP3 ``{stream: entries}`` and RESP2
    ``[[stream, entries]]``."""
    reply = _callback_free(r.connection_pool).execute_command(
        "XREADGROUP", "GROUP", GROUP, CONSUMER, "COUNT", count, "STREAMS", STREAM, ">"
    )
    if not reply:
        return []
    streams = reply.values() if isinstance(reply, dict) else (entries for _name, entries in reply)
    return [(entry_id, flat) for entries in streams for entry_id, flat in entries]


@functools.lru_cache(maxsize=8)
def _callback_free(pool: redis.ConnectionPool) -> Any:
    """A client on the same connection pool without XREADGROUP's reply callback (redis-py keeps
    the callbacks per client, so the state client is left as it is)."""
    client = redis.Redis(connection_pool=pool)
    client.response_callbacks.pop("XREADGROUP", None)
    return client
