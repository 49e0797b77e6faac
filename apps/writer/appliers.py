"""Applying receipts: ``CONCURRENCY`` threads, one database connection each (FR-W2, FR-W4).

The flush (``apps.writer.flush``) splits each round of entries by job over the threads;
``Appliers`` runs them, thread i always taking group i, and a ``Round`` is one such split being
applied. Each thread applies ``BATCH_SIZE`` receipts per transaction (``attempts_apply_finished``);
a batch that fails is bisected down to single receipts, so that one poisoned receipt never holds
back the rest of its batch, unless the database itself is unreachable. A receipt on its retry
(it failed before) is applied alone, in a transaction of its own: its batch was bisected once, and
bisecting every retry's batch again would cost each retry up to log2(BATCH_SIZE) more timeouts.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection

from apps import tracing
from apps.db_failures import BUSY, DOWN, database_failure
from apps.jobs.receipt_fold import ApplyStats, attempts_apply_finished
from apps.tracing import traceparent_current, tracing_on
from apps.writer.streams import Entry


@dataclass
class Outcome:
    """What a group of batches came to: the entries applied, the failed ones with their error (the
    receipt's fault), the deferred ones with theirs (the database was unavailable), and one record
    per transaction (``sj:writer:batches``)."""

    ok: list[Entry] = field(default_factory=list)
    failed: list[tuple[Entry, str]] = field(default_factory=list)
    deferred: list[tuple[Entry, str]] = field(default_factory=list)
    down: bool = False  # the database was down (not merely busy): read no more for now
    stats: ApplyStats = field(default_factory=ApplyStats)
    transactions: list[dict[str, Any]] = field(default_factory=list)

    def merge(self, other: Outcome) -> None:
        self.ok += other.ok
        self.failed += other.failed
        self.deferred += other.deferred
        self.down |= other.down
        self.stats.applied += other.stats.applied
        self.stats.stale += other.stats.stale
        self.transactions += other.transactions


class Appliers:
    """``size`` threads, thread i always taking group i, each with its own Django connection
    (Django connections are per thread), all closed when the flush ends."""

    def __init__(self, size: int):
        self.size = size
        self._inbox: list[queue.Queue[Callable[[], None] | None]] = []
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Appliers:
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

    def submit(self, groups: Sequence[list[Entry]]) -> Round:
        """Queue ``groups[i]`` on connection i (empty ones skipped); ``wait()`` on the result."""
        work = [(i, g) for i, g in enumerate(groups) if g]
        round_ = Round(len(work), groups=[g for _, g in work])
        if not self._threads:
            self._start()
        for n, (i, group) in enumerate(work):
            self._inbox[i].put(round_.work(n, group))
        return round_

    @staticmethod
    def apply_here(group: list[Entry]) -> Round:
        """Apply ``group`` now, on the calling thread's connection (nothing else is in flight)."""
        round_ = Round(1, groups=[group])
        round_.done(0, _group_apply(group))
        return round_


class Round:
    """The groups of one round being applied by the connections' threads."""

    def __init__(self, n: int, *, groups: list[list[Entry]]):
        self._groups = groups
        self.results: list[Outcome | BaseException | None] = [None] * n
        self._left = threading.Semaphore(0)

    def ids(self) -> frozenset[str]:
        """The stream ids being applied (asked for only when looking for abandoned entries)."""
        return frozenset(i for g in self._groups for e in g for i in e.ids)

    def done(self, i: int, result: Outcome | BaseException) -> None:
        self.results[i] = result
        self._left.release()

    def work(self, i: int, group: list[Entry]) -> Callable[[], None]:
        def apply() -> None:
            try:
                result: Outcome | BaseException = _group_apply(group)
            except BaseException as exc:  # noqa: BLE001 - handed back to the flushing thread
                result = exc
            self.done(i, result)

        return apply

    def wait(self) -> Outcome:
        for _ in self.results:
            self._left.acquire()
        total = Outcome()
        for res in self.results:
            if isinstance(res, BaseException):
                raise res
            assert res is not None
            total.merge(res)
        return total


def _group_apply(group: list[Entry]) -> Outcome:
    out = Outcome()
    for entry in (e for e in group if e.retried):
        out.merge(_batch_apply_isolating([entry]))
    fresh = [e for e in group if not e.retried]
    size = settings.SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE
    for start in range(0, len(fresh), size):
        out.merge(_batch_apply_isolating(fresh[start : start + size]))
    return out


def _batch_apply_isolating(batch: list[Entry]) -> Outcome:
    """Apply one batch in one transaction; if it fails, bisect it so that only the receipts
    that fail on their own are counted as failed. The database being down (by the error, or
    because it no longer answers) defers the whole batch, uncounted. A single receipt that lost
    to time or to another transaction (``BUSY``: a lock held elsewhere, a deadlock) is counted
    as a failure too, retried after its backoff like any: one that keeps losing (a row locked
    for longer than the whole retry schedule) ends as a dead receipt after MAX_ATTEMPTS instead
    of being deferred for ever (FR-W4)."""
    t0 = time.monotonic()
    try:
        with _fold_traced(batch) if tracing_on() else nullcontext():
            stats = attempts_apply_finished(
                [e.receipt for e in batch], timeout_s=settings.SCRAPEJOBS_DATABASE_WRITE_TIMEOUT_SECONDS
            )
    except Exception as exc:  # noqa: BLE001 - any database error: isolate, retry, set aside
        error = f"{type(exc).__name__}: {exc}"
        record = _record(size=len(batch), ms=time.monotonic() - t0, failed=True)
        failure = database_failure(exc)
        if failure == DOWN or not _database_reachable():
            return Outcome(deferred=[(e, error) for e in batch], down=True, transactions=[record])
        if len(batch) == 1:
            if failure == BUSY:
                error = f"busy: {error}"  # the dead receipt says it was never the receipt's content
            return Outcome(failed=[(e, error) for e in batch], transactions=[record])
        mid = len(batch) // 2
        out = Outcome(transactions=[record])
        out.merge(_batch_apply_isolating(batch[:mid]))
        out.merge(_batch_apply_isolating(batch[mid:]))
        return out
    record = _record(size=len(batch), ms=time.monotonic() - t0, applied=stats.applied)
    return Outcome(ok=list(batch), stats=stats, transactions=[record])


@contextmanager
def _fold_traced(batch: list[Entry]) -> Iterator[None]:
    """FR-29: the fold of a batch is one ``receipts.fold`` span, linked to the attempt span of
    each receipt that carries one; and each of those jobs gets a ``job.fold`` span in its own
    trace, under its attempt, linked back to the batch (so the job's trace shows when its
    receipt was applied, and by which batch)."""
    traced = [e.receipt for e in batch if e.receipt.trace_context]
    started_ns = time.time_ns()
    with tracing.span(
        "receipts.fold",
        root=True,
        links=[r.trace_context for r in traced],
        attributes={"scrapejobs.receipts": len(batch)},
    ):
        yield
        batch_parent = traceparent_current()
    for r in traced:
        with tracing.span(
            "job.fold",
            parent=r.trace_context,
            links=[batch_parent],
            start_ns=started_ns,
            attributes={"scrapejobs.job_id": r.job_id, "scrapejobs.attempt": r.attempt},
        ):
            pass


def _record(*, size: int, ms: float, applied: int = 0, failed: bool = False) -> dict[str, Any]:
    return {
        "at": round(time.time(), 3),
        "size": size,
        "applied": applied,
        "ms": round(ms * 1000, 1),
        "failed": failed,
    }


def _database_reachable() -> bool:
    """After a failed batch whose error does not say: is it the batch (bisect it, count its
    failure) or the database (defer all of it)?"""
    try:
        connection.ensure_connection()
        return connection.is_usable()
    except Exception:  # noqa: BLE001 - unreachable is the answer, whatever the error
        connection.close()
        return False
