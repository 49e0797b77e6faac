"""A fetch holds no database connection (NFR-8): the number of fetches one worker process
has in flight is set by its threads alone, not by its PostgreSQL pool."""

import pytest
from django.db import connection

from apps.jobs.intake import job_create
from tests.e2e.fault_support import unacked_holds
from tests.support.procs import wait_for

pytestmark = pytest.mark.e2e

FETCHES = 100
POOL = 5  # the worker's pool: 20 times smaller than the fetches it must keep in flight
TARGET_DELAY_S = 8


def _worker_connections(app_name: str) -> list[tuple[str, str]]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT state, coalesce(backend_xid::text, '') FROM pg_stat_activity WHERE application_name = %s",
            [app_name],
        )
        return cur.fetchall()


def test_a_hundred_slow_fetches_in_one_worker_hold_a_handful_of_connections(services, make_tenant, target):
    tenant = make_tenant()[0]
    # No politeness limit may bind: the point is the database pool, not the domain's cap.
    limits = dict(
        SCRAPEJOBS_DOMAIN_DEFAULT_RPS="1000",
        SCRAPEJOBS_DOMAIN_DEFAULT_BURST="1000",
        SCRAPEJOBS_DOMAIN_DEFAULT_CONCURRENCY="1000",
    )
    services(**limits).start("control")
    services(**limits).start("beat")
    # libpq names every connection of the worker process after PGAPPNAME: pg_stat_activity tells
    # them apart from the writer's, beat's and this test's.
    app_name = "sj-issue7-worker"
    worker = services(**limits, PGAPPNAME=app_name, SCRAPEJOBS_DB_POOL_MAX_SIZE=str(POOL)).start(
        "worker", concurrency=FETCHES
    )
    wait_for(lambda: " ready." in worker.tail(200), 90, what="the worker to start")
    ids = [
        str(
            job_create(
                tenant_id=tenant.id,
                url=target.url(f"/bytes/64?delay={TARGET_DELAY_S}&n={i}"),
                domain="127.0.0.1",
                timeout_s=60,
            )[0].id
        )
        for i in range(FETCHES)
    ]

    # Every fetch reaches the target before the first one is answered: all 100 are in flight at
    # once. With a connection held per fetch, no more than POOL could be.
    wait_for(lambda: len(target.requests_for("/bytes")) == FETCHES, 60, what=f"{FETCHES} fetches")
    arrivals = [t for t, *_ in target.requests_for("/bytes")]
    assert max(arrivals) - min(arrivals) < TARGET_DELAY_S, "the fetches did not overlap"
    held = _worker_connections(app_name)
    assert 1 <= len(held) <= POOL, held
    # None of them is inside a transaction while the fetches wait.
    assert all(state == "idle" and not xid for state, xid in held), held

    def final() -> int:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM jobs_job WHERE id = ANY(%s::uuid[]) AND status = 'succeeded'", [ids]
            )
            return cur.fetchone()[0]

    wait_for(lambda: final() == FETCHES, 60, what="every job to succeed")
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM jobs_attempt WHERE job_id = ANY(%s::uuid[])", [ids])
        assert cur.fetchone()[0] == FETCHES  # one attempt each: nothing waited for a connection


def test_a_scrape_message_is_acknowledged_when_its_task_starts(services, make_tenant, target):
    # apps/scraping/tasks.py: the sweeper, not redelivery, recovers a job whose worker dies, and
    # a late acknowledgement would hold the worker's prefetch slot until its event loop wakes.
    import redis
    from django.conf import settings

    tenant = make_tenant()[0]
    s = services()
    s.start("control")
    s.start("beat")
    s.start("worker", concurrency=4)
    job = job_create(tenant_id=tenant.id, url=target.url("/slow?delay=4"), domain="127.0.0.1", timeout_s=30)[
        0
    ]
    wait_for(lambda: target.requests_for("/slow"), 60, what="the fetch to reach the target")
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    # Acknowledged as its task started, and with no copy kept by kombu's ack emulation (off for
    # scrape messages); a control task acknowledged late may be there, so ask for this job's.
    assert not unacked_holds(broker, job)
    job.refresh_from_db()
    assert job.status == "running"
    wait_for(lambda: (job.refresh_from_db(), job.status)[1] == "succeeded", 30, what="the job to succeed")
