"""A PostgreSQL outage throws away no finished work (NFR-3, NFR-4, FR-W4).

The database really stops (a private PostgreSQL, tests/support/private_pg.py) while 200 jobs are
being fetched by real workers; the writer, beat and the workers keep running. Jobs finish during
the outage (their receipts wait in Redis), after their leases ran out in the database (their
worker could not renew them), and after the database is back (their worker is still fetching
when the sweeper runs again). None of them may be fetched twice: each ends ``succeeded`` with
exactly one attempt, the target saw one request per job, and no receipt was set aside as dead.

The second test stops the database for longer than the writer's whole retry schedule
(``SCRAPEJOBS_DATABASE_WRITER_MAX_ATTEMPTS`` tries, ``RETRY_DELAY_SECONDS`` doubling): a receipt
that could not be applied because the database was away is not a poison receipt.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from django.conf import settings

from tests.support.private_pg import PrivatePostgres, all_final, ledger_read, wait_until
from tests.support.target import body_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

JOBS = 200
LEASE_S = 4
OUTAGE_S = 2 * LEASE_S
# Seconds each job's target takes to answer. Claimed within a second or two of each other, they end:
# around the moment their leases run out during the outage, well after that but still during the
# outage, and after the database is back (their workers are still fetching when the sweeper runs).
DELAYS = (LEASE_S, OUTAGE_S, OUTAGE_S + 5)
DEAD_RECEIPTS = "sj:receipts:dead"


def _env(pg: PrivatePostgres, results: Path, **overrides: str) -> dict[str, str]:
    return {
        "DATABASE_URL": pg.url,
        "SCRAPEJOBS_RESULTS_DIR": str(results),
        "SCRAPEJOBS_LEASE_S": str(LEASE_S),
        "SCRAPEJOBS_SWEEP_INTERVAL_S": "1",
        "SCRAPEJOBS_PUBLISH_INTERVAL_S": "0.5",
        "SCRAPEJOBS_WEBHOOK_INTERVAL_S": "1",
        "SCRAPEJOBS_REPUBLISH_AFTER_S": "30",
        **overrides,
    }


def _submit(pg: PrivatePostgres, urls: list[str]) -> list[str]:
    out = pg.django(
        "import json, sys\n"
        "from urllib.parse import urlsplit\n"
        "from apps.tenants.services import tenant_create\n"
        "from apps.jobs.intake import job_create\n"
        "tenant = tenant_create(name='outage').tenant\n"
        f"urls = {json.dumps(urls)}\n"
        "ids = [str(job_create(tenant_id=tenant.id, url=u, domain=urlsplit(u).hostname,"
        " max_attempts=3)[0].id) for u in urls]\n"
        "print(json.dumps(ids))\n"
    )
    return list(json.loads(out.strip().splitlines()[-1]))


def _run_outage(services, target, tmp_path: Path, pg: PrivatePostgres, outage_s: float, **env: str) -> None:  # type: ignore[no-untyped-def]
    results = tmp_path / "results"
    svc = services(**_env(pg, results, **env))
    svc.start("control")
    svc.start("beat")
    for w in range(2):
        svc.start("worker", concurrency=JOBS // 2 + 10, name=f"w{w}")

    paths = [f"/bytes/{1000 + i}" for i in range(JOBS)]
    ids = _submit(pg, [target.url(f"{p}?delay={DELAYS[i % len(DELAYS)]}") for i, p in enumerate(paths)])
    path_of = dict(zip(ids, paths, strict=True))

    db = pg.connect()

    def claimed() -> bool:
        row = db.execute("SELECT count(*) FROM jobs_job WHERE attempts >= 1").fetchone()
        return row is not None and row[0] == JOBS

    wait_until(claimed, 60, "every job claimed")
    db.close()
    pg.stop("fast")
    # time is the subject: the database stays away outage_s seconds
    time.sleep(outage_s)
    pg.start()
    pg.wait_ready()
    db = pg.connect()

    wait_until(lambda: all_final(db, JOBS), 120, "every job final")

    # The exact final state of every job: succeeded, one attempt, succeeded, its body stored.
    jobs, history = ledger_read(db)
    db.close()
    wrong = {
        i: (jobs[i], history.get(i))
        for i in ids
        if jobs[i][:2] != ("succeeded", 1) or history.get(i) != [(1, "succeeded", None)]
    }
    summary = Counter((s, a) for s, a, _ in jobs.values())
    assert not wrong, f"{len(wrong)} jobs not succeeded in one attempt ({summary}): {list(wrong.items())[:5]}"
    for i in ids:
        n = int(path_of[i].rsplit("/", 1)[1])
        assert (results / str(jobs[i][2])).read_bytes() == body_for(n)
    # One request per job: nothing was fetched twice.
    per_path = Counter(r[1] for r in target.requests)
    assert {p: per_path[p] for p in paths} == dict.fromkeys(paths, 1)
    # No receipt set aside: every one was applied once the database was back.
    assert redis.Redis.from_url(settings.REDIS_URL).xlen(DEAD_RECEIPTS) == 0


@pytest.mark.parametrize("pool", ["true", "false"])
def test_an_outage_of_twice_the_lease_loses_no_running_job(services, target, tmp_path, private_pg, pool):
    # The writer's own retry schedule (8 tries, 5 s apart and doubling). With the connection pool
    # (the default) every process waits for the pool when the database is away, which hides part
    # of the damage on a short outage; without it every try fails at once, as a deployment without
    # the pool, or with a pool whose connections all broke at once, sees it.
    _run_outage(services, target, tmp_path, private_pg, OUTAGE_S, SCRAPEJOBS_DB_POOL=pool)


def test_an_outage_longer_than_the_writers_retry_schedule_sets_no_receipt_aside(
    services, target, tmp_path, private_pg
):
    # Three tries, 0.5 s then 1 s apart: the schedule is spent 1.5 s into the outage. No pool: a
    # try fails at once (connection refused) instead of waiting for the pool's 30 s timeout, so
    # the writer goes through its whole schedule while the database is away.
    _run_outage(
        services,
        target,
        tmp_path,
        private_pg,
        OUTAGE_S + 2,
        SCRAPEJOBS_DB_POOL="false",
        SCRAPEJOBS_DATABASE_WRITER_MAX_ATTEMPTS="3",
        SCRAPEJOBS_DATABASE_WRITER_RETRY_DELAY_SECONDS="0.5",
    )
