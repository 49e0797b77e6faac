"""The leased batching writer (contract section 5, seed 000; FR-W1..FR-W4 in REQUIREMENTS.md).

Workers append receipts to the Redis stream ``sj:receipts`` (``apps.writer.api.receipt_submit``)
and go back to the network. A flush (nudged by every receipt, ``apps.jobs.nudges``, so a finished
job is final within milliseconds; and from beat every
``SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S``) takes the writer lease and, while there is backlog and time
left in its budget, repeats:

1. take entries: receipts whose retry backoff has passed (XCLAIM), receipts left unacknowledged
   by a dead writer for longer than ``RECLAIM_IDLE_MS`` (XAUTOCLAIM) (these two once a second),
   then new ones (XREADGROUP);
2. drop duplicates (same natural key ``(job_id, attempt)``: the first one is applied, the others
   are acknowledged with it);
3. split them by job (crc32 of the job id modulo ``CONCURRENCY``) over ``CONCURRENCY`` threads,
   each with its own database connection, so two connections never touch one job; each thread
   applies ``BATCH_SIZE`` receipts per transaction (``attempts_apply_finished``: one multi-row
   statement, bounded by ``WRITE_TIMEOUT_SECONDS``); up to two rounds are in flight, so that a
   connection never waits for the slowest one of its round;
4. after commit, XACK and XDEL the entries: the stream only ever holds receipts not yet applied,
   so its first entry's id (a millisecond timestamp) is the writer's lag.

Failures (FR-W4): a batch that fails is split in halves and each half applied on its own, down
to single receipts, so one poison receipt never holds back the rest of its batch. (When the
database itself is unreachable the batch is not bisected: every receipt in it counts one failure.)
A receipt that failed stays pending in the consumer group, its failure count in ``sj:writer:tries``
and its next try in ``sj:writer:retry`` at ``RETRY_DELAY_SECONDS * 2**(failures-1)``; the writer
is never blocked waiting for it. After ``MAX_ATTEMPTS`` failures it goes to the dead-letter stream
``sj:receipts:dead`` (capped at about ``DEAD_LETTER_MAXLEN``) with its error, and is acknowledged.
A receipt that cannot even be decoded goes there at once.

A flush that finds the lease taken returns at once: the holder is draining. It leaves a mark that
the holder reads when it releases the lease (atomically, ``apps.writer.lease``), and the holder
then drains once more, so a receipt appended after the holder's last read is not left for beat.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import socket
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.jobs.nudges import WRITER, nudge
from apps.jobs.receipt_fold import ApplyStats, attempts_apply_finished
from apps.jobs.receipts import AttemptFinished, receipt_decode
from apps.jobs.redis import state_redis
from apps.writer.lease import Lease

logger = logging.getLogger(__name__)

STREAM = "sj:receipts"
GROUP = "writer"
DEAD_LETTERS = "sj:receipts:dead"
LEASE_KEY = "sj:writer:lease"
TRIES = "sj:writer:tries"  # hash: stream id -> failed applications so far
RETRY_AT = "sj:writer:retry"  # sorted set: stream id -> ms (Unix) of its next try
BATCHES = "sj:writer:batches"  # list: the last BATCH_RECORDS transactions (JSON), newest first
TOTALS = "sj:writer:totals"  # hash: running counters since the Redis database was created
BATCH_RECORDS = 50
WANTED_KEY = "sj:writer:wanted"  # a flush found the lease taken: the holder drains once more
PIPELINE_DEPTH = 2  # rounds in flight at once (see _drain)
MAX_REDRAINS = 20  # a flush without a budget (writer_flush_once) still ends under steady marks
SWEEP_EVERY_S = 1.0  # how often a drain looks for due retries and abandoned entries
FIELD = "r"  # the one field of a stream entry: the receipt (apps.jobs.receipts.receipt_encode)


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

    @property
    def ids(self) -> list[str]:
        return [self.id, *self.duplicates] if self.duplicates else [self.id]


@dataclass
class FlushStats:
    held: bool = False  # False: another writer holds the lease, nothing was done
    read: int = 0
    applied: int = 0
    stale: int = 0
    acked: int = 0
    failed: int = 0  # failed this time, left pending for a retry after backoff
    dead: int = 0
    transactions: int = 0


@dataclass
class _Outcome:
    ok: list[Entry] = field(default_factory=list)
    failed: list[tuple[Entry, str]] = field(default_factory=list)
    stats: ApplyStats = field(default_factory=ApplyStats)
    transactions: list[dict[str, Any]] = field(default_factory=list)

    def merge(self, other: _Outcome) -> None:
        self.ok += other.ok
        self.failed += other.failed
        self.stats.applied += other.stats.applied
        self.stats.stale += other.stats.stale
        self.transactions += other.transactions


# ----------------------------------------------------------------------------------------------
# The flush


def writer_flush(
    *,
    budget_s: float | None,
    reclaim_idle_ms: int | None = None,
    trace_key: str | None = None,
) -> FlushStats:
    """One leased drain of the receipts stream.

    Returns at once (``held=False``) when another writer holds the lease. Otherwise drains while
    there is backlog and, with ``budget_s``, for at most that long (a batch already started is
    finished). ``trace_key``: append ``[token, start, end]`` (Unix seconds) of the time the lease
    was held to that Redis list (used by the tests that check the lease excludes two writers).
    """
    r = writer_redis()
    lease = Lease(
        r,
        key=LEASE_KEY,
        ttl_ms=int(settings.SCRAPEJOBS_WRITER_LEASE_TTL_S * 1000),
        owner=CONSUMER,
        wanted_key=WANTED_KEY,
    )
    stats = FlushStats()
    deadline = None if budget_s is None else time.monotonic() + budget_s
    idle_ms = (
        settings.SCRAPEJOBS_DATABASE_WRITER_RECLAIM_IDLE_MS if reclaim_idle_ms is None else reclaim_idle_ms
    )
    # A flush that finds the lease taken returns at once, leaving its mark (WANTED_KEY): the
    # holder, at release, drains once more (receipts appended after its last read).
    redrains = 0
    while lease.acquire():
        stats.held = True
        started = time.time()
        try:
            _drain(r, lease, deadline=deadline, idle_ms=idle_ms, stats=stats)
        finally:
            if trace_key:
                r.rpush(trace_key, json.dumps([lease.token, started, time.time()]))
            lease.release()
        if not lease.wanted:
            break
        redrains += 1
        if redrains > MAX_REDRAINS or (deadline is not None and time.monotonic() >= deadline):
            writer_nudge()  # out of time: hand the mark on to a fresh flush
            break
    return stats


def writer_nudge() -> None:
    """Ask for a flush now instead of at the next beat tick (apps.jobs.nudges; a receipt's own
    nudge rides in ``receipt_submit``'s pipeline instead). Best effort: beat flushes every
    SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S anyway."""
    nudge(WRITER)


def _drain(r: Any, lease: Lease, *, deadline: float | None, idle_ms: int, stats: FlushStats) -> None:
    """Apply receipts while there is backlog, the lease is ours and there is time left."""
    _group_ensure(r)
    with _Appliers(settings.SCRAPEJOBS_DATABASE_WRITER_CONCURRENCY) as appliers:
        count = settings.SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE * appliers.size
        carry: list[Entry] = []  # read, not yet applied: their connection's batch was full
        # Rounds submitted, oldest first. Two at most: each connection has its next batch queued
        # behind the one it is applying (no connection waits for the slowest of a round), and the
        # next round is read meanwhile. A job always hashes to the same connection, and a
        # connection applies its batches in order, so two connections never touch one job.
        inflight: deque[_Round] = deque()
        sweep_at = 0.0  # monotonic time of the next look at due retries and abandoned entries
        while True:
            more = lease.held and (deadline is None or time.monotonic() < deadline)
            room = count - len(carry)
            # Retries are seconds apart and reclaims 30 s: looking once a second (and at the
            # start of every flush) is enough, and spares two Redis round trips per round.
            sweep = time.monotonic() >= sweep_at
            if sweep:
                sweep_at = time.monotonic() + SWEEP_EVERY_S
            # Read the next round while the connections apply the previous ones. `busy` matters
            # only to XAUTOCLAIM, so it is gathered only when sweeping.
            busy = frozenset().union(*(round_.ids() for round_ in inflight)) if sweep else frozenset()
            fresh = (
                _entries_take(r, count=room, reclaim_idle_ms=idle_ms, busy=busy, sweep=sweep, stats=stats)
                if more and room > 0
                else []
            )
            done = not carry and not fresh
            while inflight and (done or len(inflight) >= PIPELINE_DEPTH):
                _round_finish(r, inflight.popleft(), stats=stats)
            if done:
                break
            # While more receipts keep coming, send only full batches and carry the rest over
            # to the next round; at the end (no more, or out of time) apply everything read.
            pending = carry + fresh
            if not inflight and len(pending) <= settings.SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE:
                # Less than one batch and nothing in flight (a quiet moment): one transaction on
                # this thread's own connection, now.
                inflight.append(appliers.apply_here(pending))
                carry = []
                continue
            groups, carry = _entries_partition(pending, connections=appliers.size, final=not fresh)
            inflight.append(appliers.submit(groups))


def writer_flush_once(*, reclaim_idle_ms: int | None = None) -> FlushStats:
    """Drain everything that is ready now, synchronously (tests, scripts, the e2e harness).

    Takes the lease like any flush (so it never runs beside an active writer: ``held`` is False
    then). Receipts waiting for their retry backoff stay where they are."""
    return writer_flush(budget_s=None, reclaim_idle_ms=reclaim_idle_ms)


def _group_ensure(r: Any) -> None:
    # Idempotent; from id 0 so that receipts appended before the group existed are read too.
    try:
        r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def _entries_take(
    r: Any, *, count: int, reclaim_idle_ms: int, busy: frozenset[str], sweep: bool, stats: FlushStats
) -> list[Entry]:
    """Up to ``count`` entries to apply, duplicates folded into their first entry. ``busy``: ids
    being applied right now (a slow round may outlast RECLAIM_IDLE_MS: not taken twice).
    ``sweep``: look at due retries and abandoned entries too, not only at new receipts."""
    now_ms = int(time.time() * 1000)
    raw: list[tuple[str, dict[str, str] | None]] = []
    fresh: list[tuple[str, list[str]]] = []
    # 1. Receipts whose backoff has passed. XCLAIM (idle 0) makes them ours whoever held them.
    due = r.zrangebyscore(RETRY_AT, "-inf", now_ms, start=0, num=count) if sweep else []
    if due:
        claimed = r.xclaim(STREAM, GROUP, CONSUMER, 0, due)
        # Out of the schedule while in flight (the next round is read before this one ends); a
        # failure schedules it again, a crash leaves it pending for XAUTOCLAIM.
        r.zrem(RETRY_AT, *due)
        raw += claimed
        gone = set(due) - {entry_id for entry_id, _ in claimed}
        if gone:  # deleted from the stream meanwhile (dropped by hand): forget them
            r.pipeline().zrem(RETRY_AT, *gone).hdel(TRIES, *gone).execute()
    # 2. Receipts a dead writer read but never acknowledged.
    if sweep and len(raw) < count:
        _next, reclaimed, *_ = r.xautoclaim(
            STREAM, GROUP, CONSUMER, reclaim_idle_ms, "0-0", count=count - len(raw)
        )
        if reclaimed:
            waits = r.zmscore(RETRY_AT, [entry_id for entry_id, _ in reclaimed])
            seen = busy | {entry_id for entry_id, _ in raw}
            raw += [
                e
                for e, wait in zip(reclaimed, waits, strict=True)
                if e[0] not in seen and (wait is None or wait <= now_ms)
            ]
    # 3. New receipts.
    if len(raw) < count:
        fresh = _stream_read_new(r, count=count - len(raw))
    stats.read += len(raw) + len(fresh)
    entries: dict[tuple[str, int], Entry] = {}
    undecodable: list[tuple[str, str, str]] = []

    def add(entry_id: str, text: str, *, swept: bool) -> None:
        try:
            receipt = receipt_decode(text)
            key = (receipt.job_id, receipt.attempt)
        except (ValueError, TypeError, KeyError) as exc:
            undecodable.append((entry_id, text, f"undecodable receipt: {exc!r}"))
            return
        if (entry := entries.get(key)) is not None:
            entry.duplicates.append(entry_id)
            entry.swept |= swept
        else:
            entries[key] = Entry(id=entry_id, raw=text, receipt=receipt, swept=swept)

    for entry_id, fields in raw:
        if not fields:  # a pending id whose entry was deleted: nothing to apply
            r.pipeline().xack(STREAM, GROUP, entry_id).zrem(RETRY_AT, entry_id).hdel(
                TRIES, entry_id
            ).execute()
            continue
        add(entry_id, fields.get(FIELD, ""), swept=True)
    for entry_id, flat in fresh:
        # The entry's fields as the flat [name, value, ...] list Redis sends.
        add(entry_id, flat[flat.index(FIELD) + 1] if FIELD in flat else "", swept=False)
    for entry_id, text, error in undecodable:
        _dead_letter_add(r, entry_id=entry_id, raw=text, error=error, attempts=0)
        stats.dead += 1
    return list(entries.values())


def _stream_read_new(r: Any, *, count: int) -> list[tuple[str, list[str]]]:
    """XREADGROUP ``>``: up to ``count`` receipts never delivered before, as (id, flat fields).

    Sent without redis-py's reply callback, which turns every entry's fields into a dict (and a
    RESP3 reply into the RESP2 shape): a few microseconds per receipt on the writer's busiest
    thread (issue #7). Both reply shapes are read here: RESP3 ``{stream: entries}`` and RESP2
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


def _entries_partition(
    entries: list[Entry], *, connections: int, final: bool
) -> tuple[list[list[Entry]], list[Entry]]:
    """Split entries by job over the connections: all of them when ``final``, else at most one
    full batch per connection. Returns (group i for connection i, possibly empty; entries left
    for the next round)."""
    size = settings.SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE
    groups: list[list[Entry]] = [[] for _ in range(connections)]
    overflow: list[Entry] = []
    for e in entries:
        # By job, always to the same connection: see _drain.
        group = groups[zlib.crc32(e.receipt.job_id.encode()) % connections]
        (group if final or len(group) < size else overflow).append(e)
    return groups, overflow


def _round_finish(r: Any, round_: _Round, *, stats: FlushStats) -> None:
    outcome = round_.wait()
    stats.applied += outcome.stats.applied
    stats.stale += outcome.stats.stale
    stats.transactions += len(outcome.transactions)
    # Acknowledge only now, after the commits: a writer killed before this line leaves the
    # entries pending, and its successor applies them again (a no-op: natural keys).
    pipe = r.pipeline(transaction=True)
    done = [i for e in outcome.ok for i in e.ids]
    if done:
        pipe.xack(STREAM, GROUP, *done).xdel(STREAM, *done)
        # Only a retried or reclaimed entry can have a failure count or a retry time to clear.
        if swept := [i for e in outcome.ok if e.swept for i in e.ids]:
            pipe.zrem(RETRY_AT, *swept).hdel(TRIES, *swept)
    for record in outcome.transactions:
        pipe.lpush(BATCHES, json.dumps(record))
    pipe.ltrim(BATCHES, 0, BATCH_RECORDS - 1)
    pipe.hincrby(TOTALS, "acked", len(done)).hincrby(TOTALS, "applied", outcome.stats.applied)
    pipe.hincrby(TOTALS, "transactions", len(outcome.transactions))
    pipe.execute()
    stats.acked += len(done)
    if outcome.failed:
        _failures_record(r, outcome.failed, stats=stats)


def _failures_record(r: Any, failed: list[tuple[Entry, str]], *, stats: FlushStats) -> None:
    pipe = r.pipeline(transaction=False)
    for entry, _ in failed:
        pipe.hincrby(TRIES, entry.id, 1)
    tries: list[int] = pipe.execute()
    now_ms = time.time() * 1000
    base_ms = settings.SCRAPEJOBS_DATABASE_WRITER_RETRY_DELAY_SECONDS * 1000
    for (entry, error), n in zip(failed, tries, strict=True):
        if n >= settings.SCRAPEJOBS_DATABASE_WRITER_MAX_ATTEMPTS:
            logger.error("writer: receipt %s dead-lettered after %s attempts: %s", entry.id, n, error)
            _dead_letter_add(r, entry_id=entry.id, raw=entry.raw, error=error, attempts=n)
            if entry.duplicates:  # they share the primary's fate; the dead letter holds the key
                r.pipeline().xack(STREAM, GROUP, *entry.duplicates).xdel(STREAM, *entry.duplicates).execute()
            stats.dead += 1
        else:
            logger.warning("writer: receipt %s failed (attempt %s), retried later: %s", entry.id, n, error)
            r.zadd(RETRY_AT, {entry.id: now_ms + base_ms * 2 ** (n - 1)})
            stats.failed += 1


def _dead_letter_add(r: Any, *, entry_id: str, raw: str, error: str, attempts: int) -> None:
    fields = {
        FIELD: raw,
        "error": error[:4000],
        "stream_id": entry_id,
        "attempts": str(attempts),
        "failed_at": timezone.now().isoformat(),
    }
    pipe = r.pipeline(transaction=True)
    pipe.xadd(
        DEAD_LETTERS, fields, maxlen=settings.SCRAPEJOBS_DATABASE_WRITER_DEAD_LETTER_MAXLEN, approximate=True
    )
    pipe.xack(STREAM, GROUP, entry_id).xdel(STREAM, entry_id).zrem(RETRY_AT, entry_id).hdel(TRIES, entry_id)
    pipe.hincrby(TOTALS, "dead", 1)
    pipe.execute()


# ----------------------------------------------------------------------------------------------
# Applying batches: CONCURRENCY threads, one database connection each


class _Appliers:
    """``size`` threads, thread i always taking group i, each with its own Django connection
    (Django connections are per thread), all closed when the flush ends."""

    def __init__(self, size: int):
        self.size = size
        self._inbox: list[queue.Queue[Callable[[], None] | None]] = []
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> _Appliers:
        return self

    def __exit__(self, *exc: object) -> None:
        for q in self._inbox:
            q.put(None)
        for t in self._threads:
            t.join()

    def _start(self) -> None:
        for i in range(self.size):
            q: queue.Queue[Callable[[], None] | None] = queue.Queue()
            t = threading.Thread(target=self._loop, args=(q,), name=f"writer-apply-{i}", daemon=True)
            t.start()
            self._inbox.append(q)
            self._threads.append(t)

    @staticmethod
    def _loop(q: queue.Queue[Callable[[], None] | None]) -> None:
        try:
            while (work := q.get()) is not None:
                work()
        finally:
            connection.close()

    def submit(self, groups: Sequence[list[Entry]]) -> _Round:
        """Queue ``groups[i]`` on connection i (empty ones skipped); ``wait()`` on the result."""
        work = [(i, g) for i, g in enumerate(groups) if g]
        round_ = _Round(len(work), groups=[g for _, g in work])
        if not self._threads:
            self._start()
        for n, (i, group) in enumerate(work):
            self._inbox[i].put(round_.work(n, group))
        return round_

    @staticmethod
    def apply_here(group: list[Entry]) -> _Round:
        """Apply ``group`` now, on the calling thread's connection (nothing else is in flight)."""
        round_ = _Round(1, groups=[group])
        round_.done(0, _group_apply(group))
        return round_


class _Round:
    """The groups of one round being applied by the connections' threads."""

    def __init__(self, n: int, *, groups: list[list[Entry]]):
        self._groups = groups
        self.results: list[_Outcome | BaseException | None] = [None] * n
        self._left = threading.Semaphore(0)

    def ids(self) -> frozenset[str]:
        """The stream ids being applied (asked for only when looking for abandoned entries)."""
        return frozenset(i for g in self._groups for e in g for i in e.ids)

    def done(self, i: int, result: _Outcome | BaseException) -> None:
        self.results[i] = result
        self._left.release()

    def work(self, i: int, group: list[Entry]) -> Callable[[], None]:
        def apply() -> None:
            try:
                result: _Outcome | BaseException = _group_apply(group)
            except BaseException as exc:  # noqa: BLE001 - handed back to the flushing thread
                result = exc
            self.done(i, result)

        return apply

    def wait(self) -> _Outcome:
        for _ in self.results:
            self._left.acquire()
        total = _Outcome()
        for res in self.results:
            if isinstance(res, BaseException):
                raise res
            assert res is not None
            total.merge(res)
        return total


def _group_apply(group: list[Entry]) -> _Outcome:
    out = _Outcome()
    size = settings.SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE
    for start in range(0, len(group), size):
        out.merge(_batch_apply_isolating(group[start : start + size]))
    return out


def _batch_apply_isolating(batch: list[Entry]) -> _Outcome:
    """Apply one batch in one transaction; if it fails, bisect it so that only the receipts
    that fail on their own are counted as failed."""
    t0 = time.monotonic()
    try:
        stats = attempts_apply_finished(
            [e.receipt for e in batch], timeout_s=settings.SCRAPEJOBS_DATABASE_WRITE_TIMEOUT_SECONDS
        )
    except Exception as exc:  # noqa: BLE001 - any database error: isolate, retry, dead-letter
        error = f"{type(exc).__name__}: {exc}"
        record = _record(size=len(batch), ms=time.monotonic() - t0, failed=True)
        if len(batch) == 1 or not _database_reachable():
            return _Outcome(failed=[(e, error) for e in batch], transactions=[record])
        mid = len(batch) // 2
        out = _Outcome(transactions=[record])
        out.merge(_batch_apply_isolating(batch[:mid]))
        out.merge(_batch_apply_isolating(batch[mid:]))
        return out
    record = _record(size=len(batch), ms=time.monotonic() - t0, applied=stats.applied)
    return _Outcome(ok=list(batch), stats=stats, transactions=[record])


def _record(*, size: int, ms: float, applied: int = 0, failed: bool = False) -> dict[str, Any]:
    return {
        "at": round(time.time(), 3),
        "size": size,
        "applied": applied,
        "ms": round(ms * 1000, 1),
        "failed": failed,
    }


def _database_reachable() -> bool:
    """After a failed batch: is it the batch (bisect it) or the database (back off, all of it)?"""
    try:
        connection.ensure_connection()
        return connection.is_usable()
    except Exception:  # noqa: BLE001 - unreachable is the answer, whatever the error
        connection.close()
        return False


# ----------------------------------------------------------------------------------------------
# Dead letters (operators: admin page, bulk actions)


def dead_letters_replay(*, ids: Iterable[str] | None = None) -> int:
    """Append dead letters back to the receipts stream (as new entries, with a fresh failure
    count) and remove them from the dead letters. ``ids=None``: all of them. Returns how many."""
    r = writer_redis()
    replayed = 0
    for batch in _dead_letter_batches(r, ids):
        pipe = r.pipeline(transaction=True)
        for entry_id, fields in batch:
            pipe.xadd(STREAM, {FIELD: fields.get(FIELD, "")})
            pipe.xdel(DEAD_LETTERS, entry_id)
        pipe.execute()
        replayed += len(batch)
    return replayed


def dead_letters_drop(*, ids: Iterable[str] | None = None) -> int:
    """Delete dead letters for good. ``ids=None``: all of them. Returns how many."""
    r = writer_redis()
    dropped = 0
    for batch in _dead_letter_batches(r, ids):
        dropped += int(r.xdel(DEAD_LETTERS, *[entry_id for entry_id, _ in batch]))
    return dropped


def _dead_letter_batches(
    r: Any, ids: Iterable[str] | None, size: int = 500
) -> Iterable[list[tuple[str, dict[str, str]]]]:
    if ids is None:
        start = "-"
        while batch := r.xrange(DEAD_LETTERS, min=start, count=size):
            yield batch
            start = "(" + batch[-1][0]
        return
    wanted = list(dict.fromkeys(ids))
    for i in range(0, len(wanted), size):
        pipe = r.pipeline(transaction=False)
        for entry_id in wanted[i : i + size]:
            pipe.xrange(DEAD_LETTERS, min=entry_id, max=entry_id)
        found = [hit[0] for hit in pipe.execute() if hit]
        if found:
            yield found
