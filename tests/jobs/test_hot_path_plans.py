"""The worker's per-job read finds its job by primary key whatever the statistics say (NFR-11,
NFR-15): a burst lands on a ledger whose statistics predate it (a fresh table, autovacuum not yet
run), and a read that let the planner pick the partial index of queued rows filtered the whole
backlog for one id, its cost growing with the backlog (docs/benchmarks.md).

The statistics are made to say what they say before a burst (``ANALYZE`` of a ledger whose jobs
are all final, its indexes carrying the dead entries of 5,000 queued jobs whose insert rolled
back), then 2,000 jobs are queued and each statement is explained, run for real: it must touch a
handful of buffers, not the backlog's."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from django.db import connection, transaction

from apps.jobs.claims import CLAIM_SQL
from apps.jobs.models import Job
from apps.jobs.singleflight import DECIDABLE_JOB_SQL, job_fetch_decide
from tests.support.factories import job_make

# Committed and truncated after each test (transaction=True): a rolled-back burst would leave
# its dead entries in the ledger's indexes, whose sizes the planner reads, for later tests.
pytestmark = pytest.mark.django_db(transaction=True)


BACKLOG = 2000
DEAD = 5000


class _RolledBack(Exception):
    pass


def _burst_on_stale_statistics(tenant) -> list[uuid.UUID]:
    """A ledger whose statistics say every job is final (200 succeeded ones, analysed), then a
    burst of BACKLOG queued jobs the statistics have not seen: the ids of the queued ones. Its
    indexes also carry DEAD entries of queued jobs whose insert rolled back, as a live ledger's
    do until vacuum reaches them (a test that ran before in the same process left such entries;
    with them the planner once took the claim of one job through the queued backlog's index)."""
    first = job_make(tenant, "http://burst.test/0")
    # The same row many times over (new ids and URLs): intake's INSERT, without its cost.
    copies = """
        INSERT INTO jobs_job
        SELECT (jsonb_populate_record(j, jsonb_build_object('id', gen_random_uuid(),
                                                           'url', j.url || '?n=' || n))).*
          FROM jobs_job AS j, generate_series(1, %s) AS n
         WHERE j.id = %s
    """
    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(copies, [DEAD, first.id])
            raise _RolledBack
    except _RolledBack:
        pass
    with connection.cursor() as cur:
        cur.execute(copies, [200, first.id])
        cur.execute(
            "UPDATE jobs_job SET status = 'succeeded', attempts = 1, finished_at = now() WHERE id <> %s",
            [first.id],
        )
        cur.execute("ANALYZE jobs_job")  # the statistics before the burst
        cur.execute(copies, [BACKLOG - 1, first.id])
        cur.execute("SELECT id FROM jobs_job WHERE status = 'queued' ORDER BY created_at, id")
        return [row[0] for row in cur.fetchall()]


def _plan(sql: str, params: list | dict) -> dict:
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        (doc,) = cur.fetchone()
    return (json.loads(doc) if isinstance(doc, str) else doc)[0]["Plan"]


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _reads_by_key(plan: dict, jobs: int) -> None:
    """The claim's plan reads ``jobs_job`` twice (the claim's update and the put-back's), each by
    its primary key: an index scan, or a bitmap heap scan over the key's index (the planner's
    choice between the two moves with the statistics; both read only the jobs' pages), no row
    filtered out, a few pages per job."""
    reads = [n for n in _nodes(plan) if n.get("Relation Name") == "jobs_job" and "Scan" in n["Node Type"]]
    assert len(reads) == 2, json.dumps(plan, indent=1)
    for scan in reads:
        by = scan if "Index" in scan["Node Type"] else next(iter(scan.get("Plans", ())), {})
        assert by.get("Index Name") == "jobs_job_pkey", json.dumps(plan, indent=1)
        assert re.search(r"\(id = r(_\d+)?\.id\)", by.get("Index Cond", "")), json.dumps(plan, indent=1)
        assert scan.get("Rows Removed by Filter", 0) == 0, json.dumps(plan, indent=1)
        assert scan.get("Rows Removed by Index Recheck", 0) == 0, json.dumps(plan, indent=1)
        assert scan["Shared Hit Blocks"] + scan.get("Shared Read Blocks", 0) <= 8 * jobs, json.dumps(
            plan, indent=1
        )


def test_the_single_flight_read_touches_a_few_buffers_with_a_backlog_queued(tenant) -> None:
    ids = _burst_on_stale_statistics(tenant)
    assert len(ids) == BACKLOG
    plan = _plan(DECIDABLE_JOB_SQL, [ids[-1]])
    scans = [n for n in _nodes(plan) if n.get("Relation Name") == "jobs_job"]
    assert len(scans) == 1, json.dumps(plan, indent=1)
    (scan,) = scans
    # The whole statement, both tables: a lookup by key reads about 3 pages of each.
    assert plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0) <= 12, json.dumps(plan, indent=1)
    assert scan.get("Rows Removed by Filter", 0) == 0, json.dumps(plan, indent=1)
    assert "id =" in scan.get("Index Cond", ""), json.dumps(plan, indent=1)


@pytest.mark.parametrize("jobs", [1, 5], ids=["one-claim", "batch-of-five"])
def test_the_claim_reads_its_jobs_by_key_with_hundreds_published(tenant, jobs: int) -> None:
    """The claim's statement, for one job (a claim made inside a transaction, or by a process
    that does not batch) and for a batch (apps.jobs.claims.ClaimBatcher): taking the jobs, and
    putting back one not yet due, read each row by key, with the publisher's dispatch depth of
    jobs published and not yet taken, whatever the statistics say."""
    ids = _burst_on_stale_statistics(tenant)
    with connection.cursor() as cur:
        cur.execute("UPDATE jobs_job SET published_at = now() WHERE id = ANY(%s)", [ids[:400]])
    picked = sorted(ids[5 : 5 + jobs])
    plan = _plan(
        CLAIM_SQL,
        {"ids": picked, "workers": ["w:1:1"] * jobs, "fetch_keys": [None] * jobs, "lease_s": 60.0},
    )
    _reads_by_key(plan, jobs)
    assert Job.objects.filter(id__in=picked, status="running").count() == jobs


def test_the_read_still_decides_only_a_job_the_claim_could_take(tenant) -> None:
    """What the read answers did not change with its form: a job not queued, cancelled, or not
    yet due is decided to fetch without a key (the claim then refuses it), a queued one with."""
    due = job_make(tenant, "http://decide.test/a")
    assert job_fetch_decide(job_id=due.id).key is not None
    for change in (
        "status = 'running'",
        "cancel_requested_at = now()",
        "not_before = now() + interval '1 hour'",
    ):
        job = job_make(tenant, f"http://decide.test/{uuid.uuid4()}")
        with connection.cursor() as cur:
            cur.execute(f"UPDATE jobs_job SET {change} WHERE id = %s", [job.id])
        decision = job_fetch_decide(job_id=job.id)
        assert (decision.kind, decision.key) == ("fetch", None), change
    assert job_fetch_decide(job_id=uuid.uuid4()).key is None  # no such job


@pytest.mark.parametrize("jobs", [1, 5], ids=["one-claim", "batch-of-five"])
def test_the_claims_generic_plan_reads_its_jobs_by_key_too(tenant, jobs: int) -> None:
    """The plan a worker's connection keeps (apps/jobs/claims.py ``_planned_once``): planned once,
    without the arrays' contents, on the same stale statistics and backlog, it still reads each
    row by key."""
    ids = _burst_on_stale_statistics(tenant)
    with connection.cursor() as cur:
        cur.execute("UPDATE jobs_job SET published_at = now() WHERE id = ANY(%s)", [ids[:400]])
    picked = sorted(ids[5 : 5 + jobs])
    generic = (
        CLAIM_SQL.replace("%(ids)s", "$1")
        .replace("%(workers)s", "$2")
        .replace("%(fetch_keys)s", "$3")
        .replace("%(lease_s)s", "$4")
    )
    assert "%(" not in generic
    with connection.cursor() as cur:
        cur.execute("SET plan_cache_mode = force_generic_plan")
        cur.execute(f"PREPARE claim_generic(uuid[], text[], text[], float8) AS {generic}")
        try:
            cur.execute(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE claim_generic(%s, %s, %s, 60.0)",
                [picked, ["w:1:1"] * jobs, [None] * jobs],
            )
            (doc,) = cur.fetchone()
            cur.execute("SELECT generic_plans FROM pg_prepared_statements WHERE name = 'claim_generic'")
            assert cur.fetchone()[0] == 1
        finally:
            cur.execute("DEALLOCATE claim_generic")
            cur.execute("RESET plan_cache_mode")
    plan = (json.loads(doc) if isinstance(doc, str) else doc)[0]["Plan"]
    assert not [
        n for n in _nodes(plan) if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs_job"
    ]
    _reads_by_key(plan, jobs)
    assert Job.objects.filter(id__in=picked, status="running").count() == jobs
