"""FR-W1, FR-W2, FR-W3: 10,000 receipts (duplicates, replays, stale attempts) through real writer
processes, the active one SIGKILLed in the middle of a batch; the ledger ends exactly equal to
the fold of the receipts computed here, independently of the writer's code."""

from __future__ import annotations

import json
import random
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from apps.jobs.receipts import AttemptFinished
from apps.redis_clients import state_redis
from apps.writer.streams import DEAD_RECEIPTS, GROUP, STREAM
from apps.writer.submit import receipt_submit
from tests.support.procs import Proc, service_env, wait_for
from tests.writer.helpers import T0, RunningJob, new_id, receipt, running_jobs_create

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TOTAL = 10_000
OUTCOMES = ["succeeded", "failed_temporary", "failed_permanent", "cancelled"]


def _writer(**env: str) -> Proc:
    argv = [sys.executable, "manage.py", "writer_run", "--interval", "0.2"]
    base = {
        "SCRAPEJOBS_DATABASE_WRITER_CONCURRENCY": "2",
        "SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE": "100",
        "SCRAPEJOBS_WRITER_LEASE_TTL_S": "2",
    }
    return Proc("writer_run", argv, service_env(**{**base, **env})).start()


def _pending() -> int:
    try:
        return int(state_redis().xpending(STREAM, GROUP)["pending"])
    except Exception:  # no group yet
        return 0


def _ts(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, tz=UTC)


def _expected_fold(
    specs: list[RunningJob],
    current: dict[str, AttemptFinished],
    stale: dict[tuple[str, int], AttemptFinished],
) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, int], dict[str, Any]], set[str]]:
    """The ledger the receipts must produce, from the rules of FR-W1 to FR-W4 alone."""
    jobs: dict[str, dict[str, Any]] = {}
    attempts: dict[tuple[str, int], dict[str, Any]] = {}
    moved: set[str] = set()

    def closed(r: AttemptFinished) -> dict[str, Any]:
        return {
            "finished_at": _ts(r.finished_at),
            "outcome": r.outcome,
            "http_status": r.http_status,
            "error_class": r.error_class,
            "error": r.error,
            "duration_ms": r.duration_ms,
        }

    still_open = dict.fromkeys(
        ["finished_at", "outcome", "http_status", "error_class", "error", "duration_ms"]
    )
    for s in specs:
        for n in range(1, s.attempt):
            if n in s.open_earlier:  # the late receipt of an abandoned attempt closes its row
                attempts[(s.id, n)] = closed(stale[(s.id, n)])
            else:
                attempts[(s.id, n)] = {**still_open, "finished_at": T0, "outcome": "lost"}
        r = current.get(s.id)
        job: dict[str, Any] = {
            "status": "running",
            "attempts": s.attempt,
            "lease_owner": "w",
            "finished_at": None,
            "published_at": T0,
            "last_error": None,
            "result_key": None,
            "result_size": None,
            "result_sha256": None,
            "result_http_status": None,
            "result_stored_at": None,
        }
        if r is None:
            attempts[(s.id, s.attempt)] = still_open
            jobs[s.id] = job
            continue
        moved.add(s.id)
        attempts[(s.id, s.attempt)] = closed(r)
        if r.outcome == "succeeded":
            status = "succeeded"
        elif s.cancel_requested or r.outcome == "cancelled":
            status = "cancelled"
        elif r.outcome == "failed_permanent" or s.attempt >= s.max_attempts:
            status = "failed"
        else:
            status = "queued"
        final = status != "queued"
        job.update(
            status=status,
            lease_owner=None,
            finished_at=_ts(r.finished_at) if final else None,
            published_at=T0 if final else None,
            last_error=None
            if status == "succeeded"
            else {"class": r.error_class, "message": r.error, "http_status": r.http_status},
        )
        if status == "succeeded":
            assert r.result is not None
            job.update(
                result_key=r.result.key,
                result_size=r.result.size,
                result_sha256=r.result.sha256,
                result_http_status=r.result.http_status,
                result_stored_at=_ts(r.finished_at),
            )
        jobs[s.id] = job
    return jobs, attempts, moved


def _audit_install() -> None:
    """Count every UPDATE of a job or attempt row: 'applied twice' shows up as a second row."""
    with connection.cursor() as cur:
        cur.execute(
            """
            CREATE TABLE writer_test_audit (tbl text, key text);
            CREATE FUNCTION writer_test_audit_job() RETURNS trigger AS $$
              BEGIN INSERT INTO writer_test_audit VALUES ('job', NEW.id::text); RETURN NEW; END $$
              LANGUAGE plpgsql;
            CREATE FUNCTION writer_test_audit_attempt() RETURNS trigger AS $$
              BEGIN INSERT INTO writer_test_audit VALUES ('attempt', NEW.job_id::text || '#' || NEW.number);
              RETURN NEW; END $$ LANGUAGE plpgsql;
            CREATE TRIGGER writer_test_audit_job AFTER UPDATE ON jobs_job
              FOR EACH ROW EXECUTE FUNCTION writer_test_audit_job();
            CREATE TRIGGER writer_test_audit_attempt AFTER UPDATE ON jobs_attempt
              FOR EACH ROW EXECUTE FUNCTION writer_test_audit_attempt();
            """
        )


def _audit_remove() -> None:
    with connection.cursor() as cur:
        cur.execute(
            """
            DROP TRIGGER IF EXISTS writer_test_audit_job ON jobs_job;
            DROP TRIGGER IF EXISTS writer_test_audit_attempt ON jobs_attempt;
            DROP FUNCTION IF EXISTS writer_test_audit_job();
            DROP FUNCTION IF EXISTS writer_test_audit_attempt();
            DROP TABLE IF EXISTS writer_test_audit;
            """
        )


def test_ten_thousand_receipts_survive_a_writer_killed_mid_batch_and_fold_exactly_once() -> None:
    """FR-W1, FR-W2, FR-W3: duplicates, replays and stale-attempt receipts; the first writer
    process is SIGKILLed while it holds read-but-unacknowledged receipts; a second one reclaims
    them. The database equals the independent fold, every row was updated at most once, and the
    stream ends fully acknowledged with no dead receipts."""
    rng = random.Random(20261129)
    specs = []
    for i in range(2000):
        attempt = 1 + i % 3
        specs.append(
            RunningJob(
                id=new_id(),
                attempt=attempt,
                max_attempts=3 if i % 4 == 0 else 5,
                cancel_requested=i % 7 == 0,
                open_earlier=(attempt - 1,) if attempt > 1 and i % 5 == 0 else (),
            )
        )
    running_jobs_create(specs)

    current: dict[str, AttemptFinished] = {}
    stale: dict[tuple[str, int], AttemptFinished] = {}
    base: list[AttemptFinished] = []
    for i, s in enumerate(specs):
        if i % 10 != 9:  # one job in ten gets no receipt for its current attempt: stays running
            outcome = rng.choice(OUTCOMES)
            extra = {"retry_after_s": 0.5} if outcome == "failed_temporary" and rng.random() < 0.5 else {}
            rec = receipt(s.id, s.attempt, outcome, **extra)
            current[s.id] = rec
            base += [rec] * rng.randint(1, 3)  # duplicates: the same receipt sent again
        for n in range(1, s.attempt):  # stale: the receipt of an earlier, abandoned attempt
            stale[(s.id, n)] = receipt(s.id, n, rng.choice(OUTCOMES), finished_at=T0.timestamp() + n)
            base.append(stale[(s.id, n)])
    rng.shuffle(base)
    replays = [rng.choice(base) for _ in range(TOTAL - len(base))]
    assert len(base) > TOTAL / 2 and len(replays) > 1000

    r: Any = state_redis()
    _audit_install()
    first = second = None
    try:
        fold_from = _db_now()  # retry times are the fold's database time plus the backoff
        for sent in base:
            receipt_submit(sent)
        first = _writer()
        wait_for(lambda: r.xlen(STREAM) <= len(base) - 1500, timeout=60, what="the first writer to get going")
        # Kill it while it holds receipts it read but has not acknowledged (a batch in flight).
        wait_for(lambda: _pending() > 0, timeout=10, interval=0.001, what="a batch in flight")
        first.kill()
        left_pending = _pending()
        assert left_pending > 0, "the kill should leave read-but-unacknowledged receipts behind"
        assert 0 < r.xlen(STREAM) < len(base)

        for rec in replays:  # replays: receipts sent again later (a worker retrying its XADD)
            receipt_submit(rec)
        second = _writer(SCRAPEJOBS_DATABASE_WRITER_RECLAIM_IDLE_MS="1000")
        wait_for(
            lambda: r.xlen(STREAM) == 0 and _pending() == 0,
            timeout=120,
            interval=0.2,
            what="every receipt applied and acknowledged",
        )
        second.stop()
        fold_until = _db_now()
        assert r.xlen(DEAD_RECEIPTS) == 0

        jobs, attempts, moved = _expected_fold(specs, current, stale)
        with connection.cursor() as cur:
            cur.execute("SELECT tbl, key, count(*) FROM writer_test_audit GROUP BY tbl, key")
            updates = {(t, k): n for t, k, n in cur.fetchall()}
            cur.execute(
                "SELECT id::text, status, attempts, lease_owner, finished_at, published_at, last_error,"
                " result_key, result_size, result_sha256, result_http_status, result_stored_at,"
                " not_before FROM jobs_job"
            )
            cols = [c.name for c in cur.description]
            actual_jobs = {row[0]: dict(zip(cols[1:], row[1:], strict=True)) for row in cur.fetchall()}
            cur.execute(
                "SELECT job_id::text, number, finished_at, outcome, http_status, error_class, error,"
                " duration_ms FROM jobs_attempt"
            )
            cols = [c.name for c in cur.description]
            actual_attempts = {
                (row[0], row[1]): dict(zip(cols[2:], row[2:], strict=True)) for row in cur.fetchall()
            }
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.kill()
        _audit_remove()

    # Nothing applied twice: each moved job was updated once, each closed attempt row once.
    assert {k for (t, k), n in updates.items() if t == "job"} == moved
    assert all(n == 1 for n in updates.values()), {k: n for k, n in updates.items() if n > 1}
    closed_rows = {f"{j}#{n}" for (j, n), a in attempts.items() if a["outcome"] not in (None, "lost")}
    assert {k for (t, k) in updates if t == "attempt"} == closed_rows

    # Nothing lost: the ledger is exactly the fold.
    assert actual_attempts == attempts
    base_s, cap_s = settings.SCRAPEJOBS_RETRY_BASE_S, settings.SCRAPEJOBS_RETRY_CAP_S
    for s in specs:
        got = actual_jobs[s.id]
        not_before = got.pop("not_before")
        if isinstance(got["last_error"], str):  # Django hands jsonb to raw cursors undecoded
            got["last_error"] = json.loads(got["last_error"])
        assert got == jobs[s.id], s
        if got["status"] == "queued":  # backoff with full jitter, never sooner than Retry-After
            # On the database's clock from when the writer folded the receipt,
            # not from the receipt's finished_at (the worker's clock).
            r_ = current[s.id]
            ceiling = max(min(cap_s, base_s * 2 ** (s.attempt - 1)), r_.retry_after_s or 0)
            # time is the subject: a backoff never sooner than Retry-After,
            # on the database's clock from the fold
            assert fold_from + timedelta(seconds=r_.retry_after_s or 0) <= not_before
            assert not_before <= fold_until + timedelta(seconds=ceiling)
        else:
            assert not_before is None
    statuses = [j["status"] for j in jobs.values()]
    print({st: statuses.count(st) for st in set(statuses)}, f"left pending at kill: {left_pending}")
    assert {"succeeded", "failed", "cancelled", "queued", "running"} <= set(statuses)


def _db_now() -> datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT statement_timestamp()")
        return cur.fetchone()[0]
