"""Claim and lease: a worker takes a queued job (``queued → running``, a new attempt) and keeps
its lease alive while it fetches.

Claiming is a conditional UPDATE whose row count says who won (healthchecks' "another process got
there first"): a duplicate broker message is a no-op. The attempt number is the fencing token of
the lease: a worker whose attempt is no longer the job's current one must stop.
"""

from __future__ import annotations

import os
import threading
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection

from apps.jobs.models import counted_attempts_sql


@dataclass(frozen=True)
class ClaimedJob:
    id: uuid.UUID
    attempt: int
    method: str
    url: str
    headers: dict[str, str]
    body: str | None
    timeout_s: int
    max_attempts: int
    lease_expires_at: datetime
    result_key: str | None = None
    tenant_id: uuid.UUID | None = None  # robots.txt rules and the attempt's log lines
    render: str = "none"  # FR-30: "browser" is rendered by the browser component
    browser_options: dict[str, Any] | None = None
    # The tenant's switches as the claim read them (None: not read, e.g. a claim built by hand):
    # the fetch key's scope (apps.jobs.fetch_keys.fetch_key) and whether robots.txt is obeyed.
    share_fetches: bool | None = None
    obey_robots: bool | None = None
    # Its attempts so far that were deferrals and do not count (NFR-24): the receipt carries it,
    # so that the fold plans the retry on the counted attempts, as the sweeper does.
    deferred_attempts: int = 0
    # Re-fetching (FR-33, FR-34): whether the job asked to revalidate, and when its webhook is
    # sent (None: "final"). Either makes the worker look up the tenant's previous success.
    revalidate: bool = False
    callback_on: str | None = None


# The claim's statement, for one job (``job_claim``) or several at once (``ClaimBatcher``), each
# with its own worker and fetch key: the arrays, sorted by job id so that two batches lock their
# rows in the same order, as the writer's folds do; its result rows start with the job's id. One
# statement, so one round trip and atomic without BEGIN/COMMIT: the conditional UPDATE decides who
# owns each job, and an attempt's row is written only for a winner. Prepared on its connection (a
# plain psycopg cursor binds server-side; prepare=True, which settings/base.py lets through),
# and under load batched: a claim on its own cost PostgreSQL several times what one in a batch
# of five does, most of it per statement (parse, plan, commit; NFR-11, docs/benchmarks.md).
# statement_timestamp() is now() for a statement run on its own (autocommit, as here); inside
# a caller's transaction (tests) it still moves on from one statement to the next.
# Both updates' conditions sit in a CASE so that their only indexable clause is the id: written
# plainly they imply the predicate of a partial index, the queued backlog's (jobs_queued_backlog)
# for ``claimed``, that of published, untaken jobs (jobs_published_untaken) for ``deferred``, and
# on statistics older than a burst the planner read the jobs through it, the whole backlog
# scanned for one id, on every claim (tests/jobs/test_hot_path_plans.py; seen for a claim of
# one job, 868 buffers where the key's read takes 4).
# ``deferred`` never touches a row ``claimed`` takes (``not_before`` is past there, still to
# come here), so the two updates of one statement never meet on a row.
CLAIM_SQL = f"""
WITH t AS (SELECT statement_timestamp() AS now), req AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(workers)s::text[], %(fetch_keys)s::text[]) AS r(id, worker, fetch_key)
), claimed AS (
    UPDATE jobs_job AS j
       SET status = 'running', attempts = j.attempts + 1, lease_owner = r.worker,
           version = j.version + 1,
           lease_expires_at = t.now + make_interval(secs => %(lease_s)s),
           started_at = COALESCE(j.started_at, t.now), updated_at = t.now,
           fetch_key = COALESCE(r.fetch_key, j.fetch_key)
      FROM req AS r, t
     WHERE j.id = r.id
       AND CASE WHEN j.status = 'queued' AND {counted_attempts_sql("j")} < j.max_attempts
                     AND (j.not_before IS NULL OR j.not_before <= t.now)
                     AND j.cancel_requested_at IS NULL AND j.fetch_parked_at IS NULL
                THEN true ELSE false END
 RETURNING j.id, j.attempts, j.method, j.url, j.headers, j.body, j.timeout_s, j.max_attempts,
           j.lease_expires_at, j.tenant_id, j.render, j.browser_options, j.deferred_attempts,
           j.revalidate, j.callback_on, r.worker
), attempt AS (
    INSERT INTO jobs_attempt (job_id, number, worker, started_at)
    SELECT id, attempts, worker, t.now FROM claimed, t
    ON CONFLICT (job_id, number) DO NOTHING
), deferred AS (
    UPDATE jobs_job AS j
       SET published_at = NULL, updated_at = t.now, version = j.version + 1
      FROM req AS r, t
     WHERE j.id = r.id
       AND CASE WHEN j.status = 'queued' AND j.published_at IS NOT NULL AND j.not_before > t.now
                     AND j.cancel_requested_at IS NULL AND j.fetch_parked_at IS NULL
                THEN true ELSE false END
)
SELECT c.id, c.attempts, c.method, c.url, c.headers, c.body, c.timeout_s, c.max_attempts,
       c.lease_expires_at, c.tenant_id, c.render, c.browser_options, tt.share_fetches, tt.obey_robots,
       c.deferred_attempts, c.revalidate, c.callback_on
  FROM claimed AS c JOIN tenants_tenant AS tt ON tt.id = c.tenant_id
"""


def job_claim(*, job_id: uuid.UUID | str, worker: str, fetch_key: str | None = None) -> ClaimedJob | None:
    """Take a queued job: ``queued → running``, attempt + 1, a lease, and the attempt's row.

    Returns None when the job is not ours to run (already taken, final, cancelled, or waiting for
    its retry time): a duplicate broker message is a no-op. A job that was published but whose
    ``not_before`` has not come yet is put back in the outbox (``published_at`` cleared,
    ``not_before`` kept), so the publisher sends it again when it is due: the message is never
    simply dropped. A job parked on another job's fetch (single-flight,
    ``apps.jobs.singleflight``) is not taken; ``fetch_key``, when given, is stored with the claim
    (an elected fetch's key, which the jobs parked on it are settled by). A job that needed no
    decision (``max_age_s`` 0) is claimed without one: the claim returns the tenant's switches
    with the request, the worker computes the key from them and the fold stores it with the
    success (apps.scraping.attempt), so that later jobs can be served this fetch's result.

    Every time here is the database's (``statement_timestamp()``), never this worker's clock: whether the job is
    due, its lease's expiry and its start are compared by the publisher and the sweeper against
    the same clock, so a worker whose clock is off cannot see a due job as early, or write a lease
    that has already expired, or one that outlives it by its skew. Raises on a database error: the
    caller must then have the message delivered again (``apps.scraping.tasks``).
    """
    job_uuid = uuid.UUID(str(job_id))
    batcher = _batcher
    if batcher is not None and not connection.in_atomic_block:
        # The thread's own connection goes back to the pool first (the attempt gives it back
        # after the claim anyway): the thread leading the statement needs one, and a pool
        # smaller than the threads waiting to claim would otherwise be held by them all.
        connection.close()
        row = batcher.claim(job_uuid, worker=worker, fetch_key=fetch_key)
    else:
        row = _claim_rows([(job_uuid, worker, fetch_key)]).get(job_uuid)
    if row is None:
        return None
    return _claimed_job(job_uuid, row)


class _ClaimRequest:
    __slots__ = ("done", "error", "fetch_key", "job_id", "lead", "row", "worker")

    def __init__(self, job_id: uuid.UUID, worker: str, fetch_key: str | None):
        self.job_id = job_id
        self.worker = worker
        self.fetch_key = fetch_key
        self.row: tuple[Any, ...] | None = None
        self.error: BaseException | None = None
        self.lead = False  # this request's thread makes the next statement
        self.done = threading.Event()


class ClaimBatcher:
    """A worker process's claims, made together (NFR-11): one statement (``CLAIM_SQL``, at most
    ``max_batch`` claims) for every claim waiting. The threads that want to claim take turns
    leading (flat combining): a thread that finds nobody claiming makes the statement itself, for
    its own claim and every one that came meanwhile; the claims that arrive while it runs wait,
    and the first of them leads the next statement, for all of them, when it ends. Nothing waits
    to fill a batch: alone, a claim goes at once on its own thread, as an unbatched claim would;
    under load the batches grow by themselves with the time a statement takes. No thread of its
    own: a claim is handed from one thread to another only while a statement is in flight, never
    to a claiming thread and back (each handoff is a wait for the interpreter, docs/design/dispatch.md).

    What a requesting thread sees is what ``job_claim``'s own statement gave it: its row, or
    None (not claimable, or a second message for a job already in the batch), or the
    statement's error (the database away: the caller sends the message again, apps.scraping.tasks).
    A thread waits as long as the statement takes, bounded by the connection's own timeouts
    (docs/settings.md), and at most ``wait_s`` (then ``psycopg.OperationalError``, which the
    caller reads as the database being away): a claim still running in the database then may
    take the job with nobody to run it, which its lease brings back, as for a worker that died
    after its claim. The leading thread borrows a connection of the pool for its statement."""

    def __init__(self, *, max_batch: int = 50, wait_s: float = 300.0):
        self.max_batch = max_batch
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._pending: list[_ClaimRequest] = []
        self._leading = False  # a thread is making a statement, or has been handed the lead
        self._pid = os.getpid()

    def claim(self, job_id: uuid.UUID, *, worker: str, fetch_key: str | None) -> tuple[Any, ...] | None:
        request = _ClaimRequest(job_id, worker, fetch_key)
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's leader is not here
                self._pid, self._pending, self._leading = os.getpid(), [], False
            self._pending.append(request)
            request.lead = not self._leading
            self._leading = True
        if not request.lead and not request.done.wait(self.wait_s):
            with self._lock:
                if not request.lead:  # else the lead came with the timeout: take it
                    if request in self._pending:
                        self._pending.remove(request)
                    raise psycopg.OperationalError(
                        f"no claim decision for job {job_id} within {self.wait_s:.0f}s"
                    )
        if request.lead:
            self._lead()
        if request.error is not None:
            raise request.error
        return request.row

    def _lead(self) -> None:
        """One statement for the claims waiting (this thread's first among them), then the lead
        to the first claim that came meanwhile, or to nobody."""
        with self._lock:
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
        try:
            self._claim_batch(batch)
        except BaseException as e:  # noqa: BLE001 - handed to every claim of the batch
            for request in batch:
                request.error = e
        finally:
            with self._lock:
                for request in batch:
                    request.lead = False
                    request.done.set()
                if self._pending:
                    following = self._pending[0]
                    following.lead = True
                    following.done.set()  # wakes it to lead
                else:
                    self._leading = False

    @staticmethod
    def _claim_batch(batch: list[_ClaimRequest]) -> None:
        first: dict[uuid.UUID, _ClaimRequest] = {}
        for request in batch:  # a second message for the same job is not claimable: None
            first.setdefault(request.job_id, request)
        try:
            rows = _claim_rows([(r.job_id, r.worker, r.fetch_key) for r in first.values()])
        finally:
            connection.close()  # back to the pool (a broken one is dropped there)
        for job_id, row in rows.items():
            first[job_id].row = row


# The claim is planned once per connection (NFR-11). PostgreSQL's plan cache weighs a prepared
# statement's generic plan against the custom plans made for the values it is given; the claim's
# generic plan is costed for arrays of unknown length (a hundred rows), its custom ones for the
# one to a few jobs of a batch, so the cache kept planning the claim anew on every execution: a
# quarter of a millisecond of the database's CPU each time, about half of what a claim of one job
# cost it (docs/design/dispatch.md). Its plan does not depend on the arrays' contents (one probe
# by key per job), so before the first claim on a connection ``_planned_once`` sets the session's
# plan_cache_mode to force_generic_plan: the claim is planned at its first execution there, and
# again whenever the ledger's statistics change (ANALYZE invalidates cached plans). The setting
# reaches only statements bound server-side, which are the hot path's prepared ones (the claim,
# the single-flight read, the writer's fold, which sets it for its own transaction anyway):
# Django's queries bind client-side (settings/base.py). A plan made while the ledger is a few
# pages reads it sequentially until the next ANALYZE (a fresh install's first minutes; the
# foreign-key check of the attempt's row is planned that way already). Without prepared
# statements (a pooler that drops them) nothing is set: each execution is planned anyway.
_PLANNED_ONCE: weakref.WeakSet[Any] = weakref.WeakSet()


def _planned_once(conn: Any) -> None:
    if not settings.SCRAPEJOBS_DB_PREPARED_STATEMENTS or conn in _PLANNED_ONCE:
        return
    conn.execute("SELECT set_config('plan_cache_mode', 'force_generic_plan', false)")
    _PLANNED_ONCE.add(conn)


def _claim_rows(requests: Sequence[tuple[uuid.UUID, str, str | None]]) -> dict[uuid.UUID, tuple[Any, ...]]:
    """``CLAIM_SQL`` for ``(job id, worker, fetch key)`` requests, one per job, on this thread's
    connection: the claimed jobs' rows (without the id) by job id."""
    ordered = sorted(requests, key=lambda r: r[0])
    connection.ensure_connection()
    _planned_once(connection.connection)
    with psycopg.Cursor(connection.connection) as cur:
        cur.execute(
            CLAIM_SQL,
            {
                "ids": [job_id for job_id, _, _ in ordered],
                "workers": [worker for _, worker, _ in ordered],
                "fetch_keys": [fetch_key for _, _, fetch_key in ordered],
                "lease_s": float(settings.SCRAPEJOBS_LEASE_S),
            },
            prepare=True,
        )
        return {uuid.UUID(str(row[0])): tuple(row[1:]) for row in cur.fetchall()}


def claim_statement_prepare() -> None:
    """Prepare ``CLAIM_SQL`` on a connection of this thread, as a claim would (the same types of
    parameters), for a job that does not exist: it changes nothing (apps/scraping/warm_up.py)."""
    _claim_rows([(uuid.uuid4(), "warm-up", None)])


_batcher: ClaimBatcher | None = None


def claims_batch() -> None:
    """This process's claims go through a ``ClaimBatcher``; called as a scrape worker starts
    (scrapejobs/celery.py)."""
    global _batcher
    if _batcher is None:
        _batcher = ClaimBatcher()


def _claimed_job(job_uuid: uuid.UUID, row: tuple[Any, ...]) -> ClaimedJob:
    """The claim statement's row as a ``ClaimedJob``."""
    (attempt, method, url, headers, body, timeout_s, max_attempts, lease_expires_at, tenant_id, render,
     browser_options, share_fetches, obey_robots, deferred_attempts, revalidate, callback_on) = row  # fmt: skip
    if isinstance(headers, str) or isinstance(browser_options, str):
        import json  # noqa: PLC0415 - raw cursor: psycopg may hand jsonb back decoded or not

        headers = json.loads(headers) if isinstance(headers, str) else headers
        browser_options = json.loads(browser_options) if isinstance(browser_options, str) else browser_options
    return ClaimedJob(
        id=job_uuid,
        attempt=attempt,
        method=method,
        url=url,
        headers=headers or {},
        body=body,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        lease_expires_at=lease_expires_at,
        tenant_id=tenant_id,
        render=render,
        browser_options=browser_options,
        share_fetches=share_fetches,
        obey_robots=obey_robots,
        deferred_attempts=deferred_attempts,
        revalidate=bool(revalidate),
        callback_on=callback_on,
    )


def jobs_renew_leases(*, leases: Sequence[tuple[uuid.UUID | str, int, str]]) -> set[tuple[str, int]]:
    """Heartbeat for every lease a worker process holds, in one statement: ``leases`` are
    ``(job_id, attempt, worker)``; returns the ``(job_id, attempt)`` renewed. Fenced by the attempt
    number: one missing from the answer is no longer its worker's (a newer attempt took the job
    after its lease expired, or it ended), and that worker must stop."""
    if not leases:
        return set()
    with connection.cursor() as cur:
        # The database's clock, as in job_claim: the sweeper compares against the same one.
        cur.execute(
            """
            UPDATE jobs_job AS j SET lease_expires_at = statement_timestamp() + make_interval(secs => %s),
                                    version = j.version + 1
              FROM unnest(%s::uuid[], %s::int[], %s::text[]) AS v(id, attempt, worker)
             WHERE j.id = v.id AND j.status = 'running' AND j.attempts = v.attempt
               AND j.lease_owner = v.worker
         RETURNING j.id::text, j.attempts
            """,
            [
                float(settings.SCRAPEJOBS_LEASE_S),
                [str(j) for j, _, _ in leases],
                [a for _, a, _ in leases],
                [w for _, _, w in leases],
            ],
        )
        return {(job_id, attempt) for job_id, attempt in cur.fetchall()}
