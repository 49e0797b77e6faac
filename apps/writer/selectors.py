"""Reads of the writer's state in Redis, for the admin page and ``manage.py writer_status``."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
from django.conf import settings

from apps.jobs.receipts import receipt_decode
from apps.writer.streams import (
    BATCHES,
    DEAD_RECEIPTS,
    FIELD,
    GROUP,
    LEASE_KEY,
    RETRY_AT,
    STREAM,
    TOTALS,
    TRIES,
    WAITING,
    waiting_field,
    writer_redis,
)


@dataclass(frozen=True)
class WriterStatus:
    lag_ms: int  # age of the oldest receipt not yet applied (0: none)
    stream_length: int  # receipts not yet applied (applied ones are deleted from the stream)
    pending: int  # read by a writer, not yet acknowledged (in flight, or waiting for a retry)
    unread: int  # not yet read by any writer
    waiting_retry: int  # failed at least once, waiting for their backoff
    dead_receipts: int
    lease_holder: str | None
    lease_ttl_ms: int | None
    last_batches: list[dict[str, Any]] = field(default_factory=list)  # newest first
    totals: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[tuple[str, object]]:
        sizes = [b["size"] for b in self.last_batches]
        return [
            ("lag_ms", self.lag_ms),
            ("stream_length", self.stream_length),
            ("pending", self.pending),
            ("unread", self.unread),
            ("waiting_retry", self.waiting_retry),
            ("dead_receipts", self.dead_receipts),
            ("lease_holder", self.lease_holder or "-"),
            ("lease_ttl_ms", self.lease_ttl_ms if self.lease_ttl_ms is not None else "-"),
            ("last_batch_sizes", " ".join(map(str, sizes)) or "-"),
            ("mean_batch_size", round(sum(sizes) / len(sizes), 1) if sizes else "-"),
            *((f"total_{k}", v) for k, v in sorted(self.totals.items())),
        ]


def writer_status() -> WriterStatus:
    r = writer_redis()
    pipe = r.pipeline(transaction=False)
    pipe.time()
    pipe.xlen(STREAM)
    pipe.xrange(STREAM, count=1)
    pipe.zcard(RETRY_AT)
    pipe.xlen(DEAD_RECEIPTS)
    pipe.get(LEASE_KEY)
    pipe.pttl(LEASE_KEY)
    pipe.lrange(BATCHES, 0, 19)
    pipe.hgetall(TOTALS)
    (secs, micros), length, first, waiting, dead, holder, ttl, batches, totals = pipe.execute()
    pending = 0
    try:
        pending = int(r.xpending(STREAM, GROUP)["pending"])
    except redis.ResponseError:  # no group yet: no writer ever ran
        pass
    now_ms = secs * 1000 + micros // 1000
    # Ids are "<ms>-<seq>" and applied receipts are deleted, so the first id dates the oldest one.
    lag = max(0, now_ms - int(first[0][0].split("-")[0])) if first else 0
    return WriterStatus(
        lag_ms=lag,
        stream_length=length,
        pending=pending,
        unread=max(0, length - pending),
        waiting_retry=waiting,
        dead_receipts=dead,
        lease_holder=holder,
        lease_ttl_ms=ttl if ttl and ttl > 0 else None,
        last_batches=[json.loads(b) for b in batches],
        totals={k: int(v) for k, v in totals.items()},
    )


@dataclass(frozen=True)
class DeadReceipt:
    id: str
    receipt: dict[str, Any] | None  # None: the receipt could not be decoded (see raw)
    raw: str
    error: str
    attempts: int
    failed_at: str
    stream_id: str


def dead_receipts_list(*, limit: int = 200) -> list[DeadReceipt]:
    """The newest dead receipts first."""
    out = []
    for entry_id, fields in writer_redis().xrevrange(DEAD_RECEIPTS, count=limit):
        raw = fields.get(FIELD, "")
        try:
            receipt: dict[str, Any] | None = receipt_decode(raw).to_dict()
        except (ValueError, TypeError, KeyError):
            receipt = None
        out.append(
            DeadReceipt(
                id=entry_id,
                receipt=receipt,
                raw=raw,
                error=fields.get("error", ""),
                attempts=int(fields.get("attempts", 0)),
                failed_at=fields.get("failed_at", ""),
                stream_id=fields.get("stream_id", ""),
            )
        )
    return out


def receipts_waiting_for_s() -> float | None:
    """How long the oldest receipt still waiting has waited, in seconds, measured on the Redis
    clock alone (its stream id is Redis's time when it was added; Redis's ``TIME`` now): a
    duration, which the sweeper may set against the database's clock without mixing the two.
    None when no receipt waits."""
    since = receipts_waiting_since()
    return None if since is None else max(0.0, (since[1] - since[0]) / 1000)


def receipts_waiting_since() -> tuple[int, int] | None:
    """``(oldest, now)`` in Redis milliseconds: the time of the oldest receipt still in the stream
    and Redis's ``TIME`` read with it; None when the stream is empty.

    The sweeper uses it: a job whose lease expired while a receipt for it may still be waiting
    here is not lost, its writer is only behind. Receipts that failed on their own (a failure
    counted in ``TRIES``) are skipped, so that one poison receipt cannot hold every sweep back for
    its whole retry schedule (when all of the first ``scan`` are such and there are more, the
    last one's time is used: earlier than the truth, so the sweeper only waits longer). Receipts
    deferred because the database was unavailable count like any other, but only for
    ``SCRAPEJOBS_SWEEP_RECEIPT_WAIT_MAX_S``: one waiting longer (a database away that long, a
    receipt deferred again and again) no longer holds back the sweep of every other job's expired
    lease (its own job is still kept, ``receipts_waiting``). (``receipts_waiting`` answers the
    same question job by job.)"""
    scan = 50
    r = writer_redis()
    secs, micros = r.time()
    now_ms = secs * 1000 + micros // 1000
    horizon_ms = now_ms - int(settings.SCRAPEJOBS_SWEEP_RECEIPT_WAIT_MAX_S * 1000)
    # Stream ids are Redis's milliseconds: the range starts at the bound, older entries unread.
    head = r.xrange(STREAM, min=str(max(horizon_ms, 0)), count=scan)
    if not head:
        return None
    pipe = r.pipeline(transaction=False)
    for entry_id, _fields in head:
        pipe.hget(TRIES, entry_id)
    waiting = pipe.execute()
    oldest = next((eid for (eid, _f), w in zip(head, waiting, strict=True) if w is None), None)
    if oldest is None:
        if len(head) < scan:
            return None  # the whole stream is receipts waiting for a retry
        oldest = head[-1][0]
    return int(oldest.split("-")[0]), now_ms


def receipts_waiting(attempts: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
    """Which of these ``(job_id, attempt)`` have their receipt in the stream, submitted and not
    yet applied nor set aside: the sweeper must not call those attempts lost,
    whatever their lease says, since the writer will apply their receipt.

    ``WAITING`` names each receipt's stream id; an entry whose receipt is no longer in the stream
    (deleted by hand) is stale: it is dropped and does not count."""
    keys = list(dict.fromkeys((str(j), int(a)) for j, a in attempts))
    if not keys:
        return set()
    r = writer_redis()
    ids = r.hmget(WAITING, [waiting_field(j, a) for j, a in keys])
    found = [(key, entry_id) for key, entry_id in zip(keys, ids, strict=True) if entry_id]
    if not found:
        return set()
    pipe = r.pipeline(transaction=False)
    for _key, entry_id in found:
        pipe.xrange(STREAM, min=entry_id, max=entry_id)
    present = pipe.execute()
    stale = [waiting_field(*key) for (key, _), hit in zip(found, present, strict=True) if not hit]
    if stale:
        r.hdel(WAITING, *stale)
    return {key for (key, _), hit in zip(found, present, strict=True) if hit}
