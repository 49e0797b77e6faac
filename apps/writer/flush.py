"""The leased batching writer (FR-W1 to FR-W4; FR-W1..FR-W4 in REQUIREMENTS.md).

Workers append receipts to the Redis stream ``sj:receipts`` (``apps.writer.submit.receipt_submit``)
and go back to the network. A flush (nudged by every receipt, ``apps.jobs.nudges``, so a finished
job is final within milliseconds; and from beat every
``SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S``) takes the writer lease and, while there is backlog and time
left in its budget, repeats:

1. take entries (``apps.writer.streams`` holds the keys and the stream helpers): receipts whose
   retry backoff has passed (XCLAIM), receipts left unacknowledged by a dead writer for longer
   than ``RECLAIM_IDLE_MS`` (XAUTOCLAIM) (these two once a second), then new ones (XREADGROUP);
2. drop duplicates (same natural key ``(job_id, attempt)``: the first one is applied, the others
   are acknowledged with it);
3. split them by job (crc32 of the job id modulo ``CONCURRENCY``) over ``CONCURRENCY`` threads
   (``apps.writer.appliers``), each with its own database connection, so two connections never
   touch one job; each thread applies ``BATCH_SIZE`` receipts per transaction
   (``attempts_apply_finished``: one multi-row statement, bounded by ``WRITE_TIMEOUT_SECONDS``);
   up to two rounds are in flight, so that a connection never waits for the slowest one of its
   round;
4. after commit, XACK and XDEL the entries: the stream only ever holds receipts not yet applied,
   so its first entry's id (a millisecond timestamp) is the writer's lag.

Failures (FR-W4): a batch that fails is split in halves and each half applied on its own, down
to single receipts, so one poison receipt never holds back the rest of its batch.

The database's failures are not the receipts' (``apps.writer.appliers.
database_failure`` (apps.db_failures) tells them apart by the error's class and SQLSTATE). When the database is
down (connection refused or lost, shutdown, restart, out of resources) or no longer answers, the
batch is not bisected and its receipts are *deferred*: left pending, tried again after
``RETRY_DELAY_SECONDS``, and counted nowhere, however long the outage; the drain then stops
reading new receipts (they wait, unread, for the next flush, which tries the database again), so
an outage costs one failed transaction per flush, not one per receipt. When it is only busy
(our statement timeout, a deadlock, a serialization failure, a lock not available) the batch is
bisected as usual and a single receipt that still fails that way counts a failure like any other
(FR-W4): a receipt whose job row stays locked for longer than its whole retry schedule ends as a
dead receipt, with its error, instead of being deferred for ever and holding back the sweeper. So
a job whose fetch succeeded ends ``succeeded`` once the database is back, never among the dead
receipts, and a receipt stuck behind a lock reaches an operator.

A receipt that failed stays pending in the consumer group, its failure count in ``sj:writer:tries``
and its next try in ``sj:writer:retry`` at ``RETRY_DELAY_SECONDS * 2**(failures-1)``; the writer
is never blocked waiting for it. After ``MAX_ATTEMPTS`` failures it goes to the dead receipts, the
stream ``sj:receipts:dead`` (capped at about ``DEAD_LETTER_MAXLEN``; ``apps.writer.dead_receipts``)
with its error, and is acknowledged. A receipt that cannot even be decoded goes there at once.

A flush that finds the lease taken returns at once: the holder is draining. It leaves a mark that
the holder reads when it releases the lease (atomically, ``apps.writer.lease``), and the holder
then drains once more, so a receipt appended after the holder's last read is not left for beat.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from apps.jobs.nudges import WRITER, nudge
from apps.jobs.receipts import receipt_decode
from apps.redis_clients import WarnEvery
from apps.writer.appliers import Appliers, Round
from apps.writer.dead_receipts import dead_receipt_add
from apps.writer.lease import Lease
from apps.writer.streams import (
    BATCH_RECORDS,
    BATCHES,
    CONSUMER,
    FIELD,
    GROUP,
    LEASE_KEY,
    RETRY_AT,
    STREAM,
    TOTALS,
    TRIES,
    WAITING,
    WANTED_KEY,
    Entry,
    stream_group_ensure,
    stream_read_new,
    waiting_field,
    writer_redis,
)

logger = logging.getLogger(__name__)
_warn_unavailable = WarnEvery(logger)  # one line per 10 s during an outage, not one per flush

PIPELINE_DEPTH = 2  # rounds in flight at once (see _drain)
MAX_REDRAINS = 20  # a flush without a budget (writer_flush_once) still ends under steady marks
SWEEP_EVERY_S = 1.0  # how often a drain looks for due retries and abandoned entries


@dataclass
class FlushStats:
    held: bool = False  # False: another writer holds the lease, nothing was done
    read: int = 0
    applied: int = 0
    stale: int = 0
    acked: int = 0
    failed: int = 0  # failed this time, left pending for a retry after backoff
    deferred: int = 0  # not applied: the database was down or busy (not counted as failures)
    down: bool = False  # the database was down: the drain stopped reading
    dead: int = 0
    transactions: int = 0


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
        out_of_time = deadline is not None and time.monotonic() >= deadline
        redrains += 1
        if stats.down or (not out_of_time and not lease.wanted):  # no database, or drained
            break
        if out_of_time or redrains > MAX_REDRAINS:  # receipts may be left, marked or not
            writer_nudge()  # hand them on to a fresh flush, not to the next beat tick
            break
    return stats


def writer_nudge() -> None:
    """Ask for a flush now instead of at the next beat tick (apps.jobs.nudges; a receipt's own
    nudge rides in ``receipt_submit``'s pipeline instead). Best effort: beat flushes every
    SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S anyway."""
    nudge(WRITER)


def _drain(r: Any, lease: Lease, *, deadline: float | None, idle_ms: int, stats: FlushStats) -> None:
    """Apply receipts while there is backlog, the lease is ours and there is time left."""
    stream_group_ensure(r)
    with Appliers(settings.SCRAPEJOBS_DATABASE_WRITER_CONCURRENCY) as appliers:
        count = settings.SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE * appliers.size
        carry: list[Entry] = []  # read, not yet applied: their connection's batch was full
        # Rounds submitted, oldest first. Two at most: each connection has its next batch queued
        # behind the one it is applying (no connection waits for the slowest of a round), and the
        # next round is read meanwhile. A job always hashes to the same connection, and a
        # connection applies its batches in order, so two connections never touch one job.
        inflight: deque[Round] = deque()
        sweep_at = 0.0  # monotonic time of the next look at due retries and abandoned entries
        while True:
            # After a round the database could not take, read no more: what is read is only
            # deferred again. The next flush tries once more.
            more = lease.held and not stats.down and (deadline is None or time.monotonic() < deadline)
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


# Entries claimed from the stream: (id, fields), fields None for an id whose entry was deleted.
_Claimed = list[tuple[str, dict[str, str] | None]]


def _entries_take(
    r: Any, *, count: int, reclaim_idle_ms: int, busy: frozenset[str], sweep: bool, stats: FlushStats
) -> list[Entry]:
    """Up to ``count`` entries to apply, duplicates folded into their first entry. ``busy``: ids
    being applied right now (a slow round may outlast RECLAIM_IDLE_MS: not taken twice).
    ``sweep``: look at due retries and abandoned entries too, not only at new receipts."""
    now_ms = int(time.time() * 1000)
    raw: _Claimed = []
    due: list[str] = []
    if sweep:
        due, raw = _swept_take(r, count=count, reclaim_idle_ms=reclaim_idle_ms, busy=busy, now_ms=now_ms)
    # 3. New receipts.
    fresh = stream_read_new(r, count=count - len(raw)) if len(raw) < count else []
    stats.read += len(raw) + len(fresh)
    return _entries_fold(r, raw=raw, fresh=fresh, retried=set(due), stats=stats)


def _swept_take(
    r: Any, *, count: int, reclaim_idle_ms: int, busy: frozenset[str], now_ms: int
) -> tuple[list[str], _Claimed]:
    """The receipts due for a retry (their ids), and up to ``count`` entries: those, then those a
    dead writer read but never acknowledged."""
    raw: _Claimed = []
    # 1. Receipts whose backoff has passed. XCLAIM (idle 0) makes them ours whoever held them.
    due = r.zrangebyscore(RETRY_AT, "-inf", now_ms, start=0, num=count)
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
    if len(raw) < count:
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
    return due, raw


def _entries_fold(
    r: Any, *, raw: _Claimed, fresh: list[tuple[str, list[str]]], retried: set[str], stats: FlushStats
) -> list[Entry]:
    """The entries read, decoded, one per (job, attempt) with its duplicates; an entry deleted
    from the stream acknowledged, an undecodable one dead at once."""
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
            entries[key] = Entry(
                id=entry_id, raw=text, receipt=receipt, swept=swept, retried=entry_id in retried
            )

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
        dead_receipt_add(r, entry_id=entry_id, raw=text, error=error, attempts=0)
        stats.dead += 1
    return list(entries.values())


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


def _round_finish(r: Any, round_: Round, *, stats: FlushStats) -> None:
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
        # No longer waiting: the sweeper may treat their jobs by their leases again.
        pipe.hdel(WAITING, *{waiting_field(e.receipt.job_id, e.receipt.attempt) for e in outcome.ok})
    for record in outcome.transactions:
        pipe.lpush(BATCHES, json.dumps(record))
    pipe.ltrim(BATCHES, 0, BATCH_RECORDS - 1)
    pipe.hincrby(TOTALS, "acked", len(done)).hincrby(TOTALS, "applied", outcome.stats.applied)
    pipe.hincrby(TOTALS, "transactions", len(outcome.transactions))
    pipe.execute()
    stats.acked += len(done)
    if outcome.failed:
        _failures_record(r, outcome.failed, stats=stats)
    if outcome.deferred:
        stats.down |= outcome.down
        _deferrals_record(r, outcome.deferred, stats=stats)


def _deferrals_record(r: Any, deferred: list[tuple[Entry, str]], *, stats: FlushStats) -> None:
    """The database was unavailable: try these again after ``RETRY_DELAY_SECONDS``, without
    counting a failure (their ``TRIES`` stay as they were), whatever the length of the outage."""
    at_ms = time.time() * 1000 + settings.SCRAPEJOBS_DATABASE_WRITER_RETRY_DELAY_SECONDS * 1000
    r.zadd(RETRY_AT, {entry.id: at_ms for entry, _ in deferred})
    stats.deferred += len(deferred)
    _warn_unavailable(
        "writer: the database is down or busy, %d receipts deferred (not counted as failures): %s",
        len(deferred),
        deferred[0][1],
    )


def _failures_record(r: Any, failed: list[tuple[Entry, str]], *, stats: FlushStats) -> None:
    pipe = r.pipeline(transaction=False)
    for entry, _ in failed:
        pipe.hincrby(TRIES, entry.id, 1)
    tries: list[int] = pipe.execute()
    now_ms = time.time() * 1000
    base_ms = settings.SCRAPEJOBS_DATABASE_WRITER_RETRY_DELAY_SECONDS * 1000
    for (entry, error), n in zip(failed, tries, strict=True):
        if n >= settings.SCRAPEJOBS_DATABASE_WRITER_MAX_ATTEMPTS:
            logger.error(
                "writer: receipt %s moved to the dead receipts after %s attempts: %s", entry.id, n, error
            )
            dead_receipt_add(
                r,
                entry_id=entry.id,
                raw=entry.raw,
                error=error,
                attempts=n,
                waiting=waiting_field(entry.receipt.job_id, entry.receipt.attempt),
            )
            if entry.duplicates:  # they share the primary's fate; the dead receipt holds the key
                r.pipeline().xack(STREAM, GROUP, *entry.duplicates).xdel(STREAM, *entry.duplicates).execute()
            stats.dead += 1
        else:
            logger.warning("writer: receipt %s failed (attempt %s), retried later: %s", entry.id, n, error)
            r.zadd(RETRY_AT, {entry.id: now_ms + base_ms * 2 ** (n - 1)})
            stats.failed += 1
