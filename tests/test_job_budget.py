"""What one job costs stays within the budget committed in tests/budget.json (NFR-15).

Counts, not seconds: bench/budget.py runs a few dozen jobs through the real web, publisher,
worker, writer and end-of-job outbox, phase by phase with fixed batch sizes, on a PostgreSQL and
two Redis servers of its own, and counts per job the SQL statements by kind, the row versions and
index entries per ledger table, the WAL bytes, the Redis commands by command and the broker
messages, and the indexes on the ledger tables. The test fails, printing the whole table, when a
count goes over its budget: a new statement, index or Redis call per job is added by raising the
budget in the same commit, with its reason (docs/benchmarks.md, "The budget per job").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.budget import Budget, budget_problems, budget_propose, budget_with_tracing, measure, statement_kind
from tests.support.target import TargetServer

BUDGET_FILE = Path(__file__).with_name("budget.json")


def _measure(budget: dict, target: TargetServer, *, tracing: bool = False) -> Budget:
    """The budget file's run (jobs, batch sizes, one worker thread), every job succeeded."""
    run = budget["run"]
    measured = measure(
        jobs=run["jobs"],
        publish_batch=run["publish_batch"],
        writer_batch=run["writer_batch"],
        worker_concurrency=run["worker_concurrency"],
        target=target.base_url,
        tracing=tracing,
    )
    assert measured.succeeded == run["jobs"], measured.table()
    return measured


@pytest.mark.e2e
def test_a_job_costs_no_more_than_its_budget(target: TargetServer) -> None:
    budget = json.loads(BUDGET_FILE.read_text())
    measured = _measure(budget, target)
    problems = budget_problems(measured, budget)
    proposal = budget_propose(measured, budget)
    assert not problems, (
        "over the budget in tests/budget.json:\n  "
        + "\n  ".join(problems)
        + f"\n\n{measured.table()}\n\nthis run's counts as a budget:\n{json.dumps(proposal, indent=2)}"
    )


@pytest.mark.e2e
def test_a_traced_job_costs_what_an_untraced_one_does_but_for_its_trace_context(target: TargetServer) -> None:
    """FR-29: with tracing on, every job keeps its request's trace context and its steps are
    spans; what that adds to a job's counts is held by tests/budget.json's ``tracing`` entry (WAL:
    the context is written with the job and carried by its receipt), every other count stays
    within the untraced budget: no statement or Redis command is added for tracing."""
    budget = json.loads(BUDGET_FILE.read_text())
    run = budget["run"]
    measured = _measure(budget, target, tracing=True)
    assert measured.traced_jobs == run["jobs"], "tracing was not on: no job kept a trace context"
    assert measured.spans >= 5 * run["jobs"], f"{measured.spans} spans for {run['jobs']} jobs"
    traced = budget_with_tracing(budget)
    problems = budget_problems(measured, traced)
    assert not problems, (
        "over the traced budget (tests/budget.json, per_job with tracing's entries):\n  "
        + "\n  ".join(problems)
        + f"\n\n{measured.table()}"
    )


def _budget(per_job: dict[str, float], *, indexes: int = 20) -> Budget:
    measured = Budget(jobs=10, totals={k: v * 10 for k, v in per_job.items()})
    measured.indexes = {"jobs_job": [f"index {i}" for i in range(indexes)]}
    return measured


def test_a_count_over_its_budget_is_reported() -> None:
    budget = {"per_job": {"sql:INSERT jobs_job": 1.0}, "indexes": {"jobs_job": 20}, "timing_dependent": {}}
    assert budget_problems(_budget({"sql:INSERT jobs_job": 1.0}), budget) == []
    assert budget_problems(_budget({"sql:INSERT jobs_job": 1.1}), budget) == [
        "sql:INSERT jobs_job: 1.1000 per job, budget 1.0000"
    ]


def test_a_statement_the_budget_does_not_name_is_over_it() -> None:
    budget = {"per_job": {}, "indexes": {"jobs_job": 20}, "timing_dependent": {}}
    assert budget_problems(_budget({"sql:UPDATE jobs_job": 0.1}), budget) == [
        "sql:UPDATE jobs_job: 0.1000 per job, budget 0.0000"
    ]


def test_one_more_index_on_the_ledger_is_over_the_budget() -> None:
    budget = {"per_job": {}, "indexes": {"jobs_job": 20}, "timing_dependent": {}}
    assert budget_problems(_budget({}, indexes=21), budget) == ["indexes on jobs_job: 21, budget 20"]


def test_wal_bytes_may_exceed_the_budget_by_the_tolerance_only() -> None:
    budget = {
        "per_job": {"wal_bytes": 1000.0},
        "indexes": {},
        "timing_dependent": {},
        "wal_bytes_tolerance": 0.1,
    }
    assert budget_problems(_budget({"wal_bytes": 1099.0}, indexes=0), budget) == []
    assert budget_problems(_budget({"wal_bytes": 1101.0}, indexes=0), budget) == [
        "wal_bytes: 1101.0000 per job, budget 1000.0000"
    ]


def test_a_timing_dependent_count_has_a_ceiling() -> None:
    budget = {
        "per_job": {},
        "indexes": {},
        "timing_dependent": {"redis_state:exists": [3.0, "watcher ticks"]},
    }
    assert budget_problems(_budget({"redis_state:exists": 3.0}, indexes=0), budget) == []
    assert budget_problems(_budget({"redis_state:exists": 3.5}, indexes=0), budget) == [
        "redis_state:exists: 3.5000 per job, budget 3.0000"
    ]


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("INSERT INTO jobs_job (id) VALUES (1)", "INSERT jobs_job"),
        ('UPDATE "jobs_job" SET published_at = now()', "UPDATE jobs_job"),
        ("WITH t AS (SELECT 1), claimed AS (UPDATE jobs_job SET x = 1) SELECT 1", "WITH UPDATE jobs_job"),
        ("SELECT j.id FROM jobs_job AS j JOIN tenants_tenant t ON true", "SELECT jobs_job"),
        ("SELECT pg_try_advisory_xact_lock(1)", "SELECT pg_try_advisory_xact_lock()"),
        ("-- a comment\nCOMMIT", "COMMIT"),
    ],
)
def test_statements_are_counted_by_verb_and_first_table(sql: str, kind: str) -> None:
    assert statement_kind(sql) == kind
