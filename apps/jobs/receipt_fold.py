"""The receipt fold: the writer folds finished-attempt receipts (``apps.jobs.receipts``) into the
ledger, one statement per batch, closing each attempt and moving its job as the retry planner
(``apps.jobs.lifecycle``) says. Replays and stale receipts change nothing (FR-W1 to FR-W4)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from django.conf import settings
from django.db import connection, transaction

from apps.jobs.final_notices import JOB_FINAL_CHANNEL
from apps.jobs.lifecycle import NextState, plan_after_attempt
from apps.jobs.models import AttemptOutcome, JobStatus, counted_attempts_sql
from apps.jobs.receipts import AttemptFinished
from apps.jobs.singleflight import jobs_fetch_settle


def _ts(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, tz=UTC)


@dataclass
class ApplyStats:
    applied: int = 0  # receipts that moved their job
    stale: int = 0  # receipts that moved nothing (duplicates, older attempts, final jobs)


def attempts_apply_finished(
    receipts: Sequence[AttemptFinished], *, timeout_s: float | None = None
) -> ApplyStats:
    """Fold finished-attempt receipts into the ledger, in one transaction of one statement
    whatever the number of receipts (the leased writer calls it once per batch).

    The rule for replays and stale receipts (FR-W1 to FR-W4, FR-W2 in REQUIREMENTS.md):
    - receipts are keyed by ``(job_id, attempt)``; within one call the first receipt of a key
      wins and later ones are ignored;
    - the attempt row is written only while it is still open (``finished_at IS NULL``), so a
      replay changes nothing;
    - the job moves only if it is still ``running`` with ``attempts`` equal to the receipt's
      attempt (the fencing token). A receipt for an older attempt, or for a job that is already
      final, leaves the job alone: the first final state wins.

    ``timeout_s`` bounds the transaction (statement and idle-in-transaction timeouts, SET LOCAL).
    """
    unique: dict[tuple[str, int], AttemptFinished] = {}
    for r in receipts:
        unique.setdefault((str(r.job_id), int(r.attempt)), r)
    batch = list(unique.values())
    stats = ApplyStats()
    if not batch:
        return stats
    params = _apply_params(batch)
    with transaction.atomic():
        connection.ensure_connection()
        # A plain psycopg cursor binds parameters server-side; Django's cursor binds them
        # client-side, quoting every array element in Python (more costly than the statement).
        cur = psycopg.Cursor(connection.connection)
        # Pipeline mode: the settings and the statement go in one round trip, then COMMIT. Both
        # are prepared on their connection (prepare=True; settings/base.py lets only such
        # statements be prepared), and the statement's plan is the generic one
        # (plan_cache_mode): planning it anew for every batch was about a tenth of the
        # database's CPU per receipt, and its plan (index probes per receipt) does not depend
        # on the arrays' contents. This needs a direct connection or a pooler that keeps
        # prepared statements (PgBouncer 1.21+ with max_prepared_statements).
        names, values = ["plan_cache_mode"], ["force_generic_plan"]
        if timeout_s is not None:
            ms = str(max(1, int(timeout_s * 1000)))
            names += ["statement_timeout", "idle_in_transaction_session_timeout"]
            values += [ms, ms]
        with connection.connection.pipeline():
            cur.execute(
                "SELECT set_config(name, value, true) FROM unnest(%b::text[], %b::text[]) AS s(name, value)",
                [names, values],
                prepare=True,
            )
            cur.execute(_APPLY_SQL, params, prepare=True)
            moved, _finals = cur.fetchone() or (0, 0)
        cur.close()
        # Single-flight: the jobs waiting on a fetch that just ended are served its outcome, or
        # one of them takes the fetch over, in this transaction (a statement of its own, so it
        # sees the jobs parked while the batch was being folded).
        jobs_fetch_settle([r.job_id for r in batch])
    stats.applied = moved
    stats.stale = len(receipts) - moved
    return stats


# One statement per batch (it was four, in three round trips):
# - ``v``: the batch, one row per receipt, with the job's next state planned by Python
#   (``plan_after_attempt``) for each of the three cases the job's row decides (see _apply_params);
# - ``closed``: close the attempt rows still open (a replay changes nothing);
# - ``locked``: lock the batch's running jobs in id order (claims and cancels lock single rows,
#   the sweeper skips locked ones, so a consistent order here is all that keeps two batches,
#   of a writer that lost its lease and of its successor, from deadlocking); it also reads what
#   picks the plan: a cancel was asked for, the attempt was the last one;
# - ``moved``: apply the picked plan, fenced again by status and attempt (the fencing token);
# - then NOTIFY (delivered on commit) each job that became final, for ``?wait=`` listeners.
# The jobs parked on an elected fetch are settled after it (apps.jobs.singleflight).
# The two UPDATEs touch different tables, so running them in one statement (one snapshot) is
# the same as running them one after the other, as before.
_APPLY_SQL = f"""
WITH v AS (
    SELECT *
      FROM unnest(%b::uuid[], %b::int[], %b::timestamptz[], %b::text[], %b::int[], %b::text[],
                  %b::text[], %b::bigint[], %b::text[], %b::float8[], %b::text[], %b::text[],
                  %b::text[], %b::text[], %b::bigint[], %b::text[], %b::text[], %b::int[],
                  %b::int[], %b::int[], %b::text[], %b::jsonb[], %b::text[], %b::bool[],
                  %b::uuid[], %b::uuid[], %b::timestamptz[])
           AS v(job_id, attempt, finished_at, outcome, http_status, error_class, error,
                duration_ms, go, go_delay_s, last, cancel, last_error, result_key, result_size,
                result_sha256, result_content_type, result_http_status, subrequests_made,
                subrequests_blocked, result_final_url, result_headers, fetch_key, changed,
                previous_job, revalidated_from, stored_at)
), closed AS (
    UPDATE jobs_attempt AS a
       SET finished_at = v.finished_at, outcome = v.outcome, http_status = v.http_status,
           error_class = v.error_class, error = left(v.error, 2000),
           duration_ms = v.duration_ms, subrequests_made = v.subrequests_made,
           subrequests_blocked = v.subrequests_blocked, revalidated_from = v.revalidated_from
      FROM v
     WHERE a.job_id = v.job_id AND a.number = v.attempt AND a.finished_at IS NULL
), locked AS (
    -- Deferred attempts (NFR-24) are not counted: only the others spend max_attempts.
    SELECT j.id, j.attempts, {counted_attempts_sql("j")} >= j.max_attempts AS last,
           j.cancel_requested_at IS NOT NULL AS cancel
      FROM jobs_job AS j
     WHERE j.id IN (SELECT job_id FROM v) AND j.status = 'running'
     ORDER BY j.id
       FOR UPDATE OF j
), planned AS (
    SELECT v.*, p.status, p.status <> 'queued' AS final,
           -- The retry's delay from the database's clock, which the publisher compares
           -- not_before with; not from the worker's (its receipt's finished_at), which may be
           -- off by any amount.
           CASE WHEN p.status = 'queued' THEN now() + make_interval(secs => v.go_delay_s) END
               AS not_before,
           p.status = 'succeeded' AND v.result_key IS NOT NULL AS has_result
      FROM locked AS l
      JOIN v ON v.job_id = l.id AND v.attempt = l.attempts
     CROSS JOIN LATERAL (
           SELECT CASE WHEN l.cancel THEN v.cancel WHEN l.last THEN v.last ELSE v.go END AS status
           ) AS p
), moved AS (
    UPDATE jobs_job AS j
       SET status = p.status, lease_owner = NULL, lease_expires_at = NULL, version = j.version + 1,
           -- A deferral (NFR-24) is not counted (max_attempts stays the caller's) and keeps the
           -- last real error; its not-before is the domain's, which GET /jobs/{{id}} reports as
           -- domain_rate.
           deferred_attempts = j.deferred_attempts + (p.outcome = 'deferred')::int,
           last_error = CASE WHEN p.outcome = 'deferred' THEN j.last_error ELSE p.last_error::jsonb END,
           defer_reason = CASE WHEN p.outcome = 'deferred' AND p.status = 'queued' THEN 'domain_rate'
                               ELSE j.defer_reason END,
           deferred_until = CASE WHEN p.outcome = 'deferred' AND p.status = 'queued' THEN p.not_before
                                 ELSE j.deferred_until END,
           result_key = CASE WHEN p.has_result THEN p.result_key ELSE j.result_key END,
           result_size = CASE WHEN p.has_result THEN p.result_size ELSE j.result_size END,
           result_sha256 = CASE WHEN p.has_result THEN p.result_sha256 ELSE j.result_sha256 END,
           result_content_type = CASE WHEN p.has_result THEN p.result_content_type
                                      ELSE j.result_content_type END,
           result_http_status = CASE WHEN p.has_result THEN p.result_http_status
                                     ELSE j.result_http_status END,
           -- A 304 (FR-33) keeps the previous success's body, aged by when that was fetched.
           result_stored_at = CASE WHEN p.has_result THEN COALESCE(p.stored_at, p.finished_at)
                                   ELSE j.result_stored_at END,
           result_final_url = CASE WHEN p.has_result THEN p.result_final_url ELSE j.result_final_url END,
           result_headers = CASE WHEN p.has_result THEN p.result_headers ELSE j.result_headers END,
           -- The key of a fetch claimed without a decision (max_age_s 0): stored with its
           -- success, the only version that later jobs look it up in (apps/jobs/singleflight.py).
           fetch_key = CASE WHEN p.has_result THEN COALESCE(p.fetch_key, j.fetch_key) ELSE j.fetch_key END,
           -- Re-fetching (FR-34): set only for a job that asked (its receipt says; null else).
           changed = CASE WHEN p.has_result THEN p.changed ELSE j.changed END,
           previous_job = CASE WHEN p.has_result THEN p.previous_job ELSE j.previous_job END,
           finished_at = CASE WHEN p.final THEN p.finished_at ELSE j.finished_at END,
           -- The end-of-job outbox (apps/jobs/final_notices.py) holds what there is to announce:
           -- a job without a callback_url has nothing, so it leaves this write announced
           -- already, and the job's row needs no fifth version (and its index entries) for the
           -- stamp (NFR-15).
           -- A callback_on "change" job whose body did not change has nothing to announce
           -- either (FR-34).
           final_published_at = CASE WHEN NOT p.final THEN j.final_published_at
                                     WHEN j.callback_url IS NULL THEN now()
                                     WHEN j.callback_on = 'change' AND p.has_result
                                          AND p.changed IS FALSE THEN now() END,
           published_at = CASE WHEN p.final THEN j.published_at ELSE NULL END,
           not_before = p.not_before,
           updated_at = now()
      FROM planned AS p
     WHERE j.id = p.job_id AND j.status = 'running' AND j.attempts = p.attempt
 RETURNING j.id::text AS id, p.final
)
SELECT count(*), count(CASE WHEN final THEN pg_notify(%b, id) END) FROM moved
"""


def _apply_params(batch: Sequence[AttemptFinished]) -> list[Any]:
    """The statement's arrays, one element per receipt. The job's next state depends on two
    things only its locked row knows (a cancel was asked for; this was its last attempt), so
    ``plan_after_attempt`` (the one place that rule lives) is asked for each of the three cases
    and the statement picks one: ``go`` (neither), ``last``, ``cancel``. Only ``go`` may be a
    retry, so only its delay is sent (the statement adds it to the database's clock)."""
    base, cap = settings.SCRAPEJOBS_RETRY_BASE_S, settings.SCRAPEJOBS_RETRY_CAP_S
    cols: list[list[Any]] = [[] for _ in range(27)]
    (job_id, attempt, finished_at, outcome, http_status, error_class, error, duration_ms, go,
     go_delay_s, last, cancel, last_error, result_key, result_size, result_sha256,
     result_content_type, result_http_status, subrequests_made, subrequests_blocked, result_final_url,
     result_headers, fetch_key, changed, previous_job, revalidated_from, stored_at) = cols  # fmt: skip
    for r in batch:
        finished = _ts(r.finished_at)
        nxt, nxt_last, nxt_cancel = _plans(r, now=finished, base=base, cap=cap)
        res = r.result
        job_id.append(r.job_id)
        attempt.append(r.attempt)
        finished_at.append(finished)
        outcome.append(r.outcome)
        http_status.append(r.http_status)
        error_class.append(r.error_class)
        error.append(r.error or None)
        duration_ms.append(r.duration_ms)
        go.append(str(nxt.status))
        # A delay, not a time: the statement adds it to the database's clock.
        go_delay_s.append(None if nxt.not_before is None else (nxt.not_before - finished).total_seconds())
        last.append(str(nxt_last.status))
        cancel.append(str(nxt_cancel.status))
        err = _last_error(r)
        last_error.append(None if err is None else orjson.dumps(err).decode())
        result_key.append(None if res is None else res.key)
        result_size.append(None if res is None else res.size)
        result_sha256.append(None if res is None else res.sha256)
        result_content_type.append(None if res is None else res.content_type)
        result_http_status.append(None if res is None else res.http_status)
        subrequests_made.append(r.subrequests_made)
        subrequests_blocked.append(r.subrequests_blocked)
        result_final_url.append(None if res is None else res.final_url)
        result_headers.append(
            None if res is None or res.headers is None else orjson.dumps(res.headers).decode()
        )
        fetch_key.append(None if res is None else res.fetch_key)
        changed.append(None if res is None else res.changed)
        previous_job.append(None if res is None else res.previous_job)
        revalidated_from.append(None if res is None else res.revalidated_from)
        stored_at.append(None if res is None or res.stored_at is None else _ts(res.stored_at))
    return [*cols, JOB_FINAL_CHANNEL]


def _plans(
    r: AttemptFinished, *, now: datetime, base: float, cap: float
) -> tuple[NextState, NextState, NextState]:
    """The job's next state after receipt ``r`` in each of the three cases ``_apply_params`` sends:
    ``go``, ``last`` and ``cancel``."""
    # The backoff's exponent is the attempts that count (NFR-24), as the sweeper's.
    counted = r.counted_attempt
    plan = functools.partial(
        plan_after_attempt,
        outcome=r.outcome,
        attempt=counted,
        retry_after_s=r.retry_after_s,
        now=now,
        base=base,
        cap=cap,
    )
    nxt = plan(max_attempts=counted + 1, cancel_requested=False)
    nxt_last = plan(max_attempts=counted, cancel_requested=False)
    nxt_cancel = plan(max_attempts=counted + 1, cancel_requested=True)
    if nxt_cancel.status == JobStatus.QUEUED or (
        nxt_last.status == JobStatus.QUEUED and r.outcome != AttemptOutcome.DEFERRED
    ):
        # The statement sends only `go` back to the queue (and `last` for a deferral, which
        # is never the last: with the same delay); a rule that retried a cancelled job or a
        # last attempt would need its own not_before here.
        raise AssertionError(f"unexpected plan for {r.natural_key}: {nxt_last}, {nxt_cancel}")
    return nxt, nxt_last, nxt_cancel


def _last_error(r: AttemptFinished) -> dict[str, Any] | None:
    if r.outcome == AttemptOutcome.SUCCEEDED:
        return None
    return {"class": r.error_class, "message": r.error, "http_status": r.http_status}
