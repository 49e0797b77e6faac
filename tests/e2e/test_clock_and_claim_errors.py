"""A worker with a wrong clock, and a worker that cannot reach the database when a message comes:
no message is dropped, no job waits for the sweeper's republish (NFR-3, NFR-4,
NFR-8, NFR-1-3.3).

Real worker, writer and beat processes, real PostgreSQL and Redis. The worker's wall clock is
shifted by ``tests/support/clock_skew/sitecustomize.py`` (time.time, datetime.now and so Django's
timezone.now); the writer and beat keep the machine's clock, as the database does. The database
is taken from the worker alone by a TCP proxy the test cuts (``tests/support/tcp_proxy.py``).
``SCRAPEJOBS_REPUBLISH_AFTER_S`` stays at its default (300 s) so that a dropped message shows as a
job that misses the bound, and the bounds are the latency the issue asks for.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from apps.jobs.models import AttemptOutcome, Job, JobStatus
from apps.politeness.models import DomainPolicy
from tests.e2e.fault_support import attempt_history, fast_env, sha256, submit, wait_all_final
from tests.support.procs import Proc, wait_for
from tests.support.target import body_for
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SKEW_DIR = Path(__file__).resolve().parents[1] / "support" / "clock_skew"
# Every job of the skew test is final within this long of its submission when nothing waits for a
# skewed clock: ten jobs of 2 s or less, a retry after at most 0.2 s, four jobs of a domain paced
# at 2 per second. Below the 30 s skew (a deferral or retry shifted by it misses the bound) and
# far below the 300 s republish (a dropped message misses it).
SKEW_BOUND_S = 25.0
# The claim-error test: the database comes back for the worker, and every job is final within
# this long (a redelivery pauses 1, 2, 4, 8 s; the republish would take 300 s).
OUTAGE_BOUND_S = 30.0


def _skew_seen(proc: Proc) -> float:
    """The skew the worker process itself reported at start (its patched clocks against the real
    one): proof that the test does not pass with an unskewed worker."""
    line = wait_for(
        lambda: re.search(r"clock-skew: \S+ real=(\S+) time\.time=(\S+) datetime\.now=(\S+)", _log(proc)),
        timeout=30,
        what="the worker's clock-skew line",
    )
    assert isinstance(line, re.Match)
    real, by_time, by_datetime = (float(g) for g in line.groups())
    assert abs((by_time - real) - (by_datetime - real)) < 0.5
    return by_datetime - real


def _log(proc: Proc) -> str:
    return proc.log.read_text(errors="replace")


def _worker_ready(proc: Proc) -> bool:
    return "ready." in _log(proc)


@pytest.mark.parametrize("skew_s", [30, -30], ids=["ahead", "behind"])
def test_a_worker_whose_clock_is_30s_off_starts_every_job_within_the_normal_bound(
    services, make_tenant, target, tmp_path, skew_s
):
    """Due-ness, leases, deferrals and retry times are all on the database's clock: a worker 30 s
    ahead does not make deferred and retried jobs wait 30 s more, and a worker 30 s behind
    neither writes leases that have already expired (the sweeper took its running jobs) nor
    drops messages of jobs the publisher saw as due and it did not."""
    svc = services(**fast_env(tmp_path, SCRAPEJOBS_REPUBLISH_AFTER_S="300"))
    svc.start("control")
    svc.start("beat")
    worker = svc.start(
        "worker",
        concurrency=8,
        env={"PYTHONPATH": str(SKEW_DIR), "SCRAPEJOBS_TEST_CLOCK_SKEW_S": str(skew_s)},
    )
    assert _skew_seen(worker) == pytest.approx(skew_s, abs=1)
    # A paced domain: "localhost" (the target again) at 2 requests/s, so most of its jobs are
    # deferred by the politeness gate (a not-before time) before they run.
    DomainPolicy.objects.create(domain="localhost", requests_per_second=2, burst=1, max_concurrency=10)
    wait_for(lambda: _worker_ready(worker), timeout=60, what="worker ready")

    tenant, _, _ = make_tenant()
    started = time.monotonic()
    # Longer than the 3 s lease's renewal period: a lease written on a clock 30 s behind has
    # expired when it is written, and the sweeper (every second) would take the job.
    slow = [submit(tenant, target.url(f"/bytes/{1000 + i}?delay=2")) for i in range(4)]
    # 503 once, then 200: the retry's not-before time comes from the receipt.
    flaky = [submit(tenant, target.url(f"/flaky/{i}?fail=1")) for i in range(3)]
    paced = [
        submit(tenant, target.url(f"/bytes/{2000 + i}").replace("127.0.0.1", "localhost")) for i in range(4)
    ]
    every = slow + flaky + paced
    wait_all_final([j.id for j in every], timeout=SKEW_BOUND_S, what=f"jobs with a worker {skew_s:+d}s off")
    # time is the subject: every job ends within the skew bound, where a
    # worker trusting its own clock would wait out the skew
    assert time.monotonic() - started < SKEW_BOUND_S

    for i, job in enumerate(slow):
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED, job.last_error
        assert attempt_history(job) == [(1, AttemptOutcome.SUCCEEDED, None)]
        assert job.result_sha256 == sha256(body_for(1000 + i))
    for i, job in enumerate(flaky):
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED, job.last_error
        assert attempt_history(job) == [
            (1, AttemptOutcome.TEMPORARY, "http_503"),
            (2, AttemptOutcome.SUCCEEDED, None),
        ]
        assert len(target.requests_for(f"/flaky/{i}")) == 2
    for i, job in enumerate(paced):
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED, job.last_error
        assert attempt_history(job) == [(1, AttemptOutcome.SUCCEEDED, None)]
        assert job.result_sha256 == sha256(body_for(2000 + i))
    assert len(target.requests_for("/bytes/")) == len(slow) + len(paced)


def test_a_worker_that_cannot_reach_the_database_sends_the_message_again_and_every_job_succeeds(
    services, make_tenant, target, tmp_path
):
    """The worker takes the messages while the database is unreachable for it alone: its politeness
    read and its claim raise. Each message is delivered again (never acknowledged and forgotten),
    so once the database is back every job succeeds promptly, once, without waiting for the 300 s
    republish."""
    s = connection.settings_dict
    proxy = TcpProxy(
        upstream_host=s.get("HOST") or "127.0.0.1", upstream_port=int(s.get("PORT") or 5432)
    ).start()
    try:
        svc = services(**fast_env(tmp_path, SCRAPEJOBS_REPUBLISH_AFTER_S="300"))
        svc.start("control")
        svc.start("beat")
        worker_db = f"postgres://{s['USER']}@127.0.0.1:{proxy.port}/{s['NAME']}"
        # No pool for this worker: a pool would hold each claim up to its 30 s checkout timeout
        # instead of raising, which is the same outcome, later.
        worker = svc.start(
            "worker", concurrency=8, env={"DATABASE_URL": worker_db, "SCRAPEJOBS_DB_POOL": "false"}
        )
        wait_for(lambda: _worker_ready(worker), timeout=60, what="worker ready")

        proxy.cut()
        tenant, _, _ = make_tenant()
        jobs = [submit(tenant, target.url(f"/bytes/{3000 + i}")) for i in range(6)]
        ids = [j.id for j in jobs]
        broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        # Every job published and its message taken by the worker, which could not claim it.
        wait_for(
            lambda: Job.objects.filter(id__in=ids, published_at__isnull=False).count() == len(ids),
            timeout=30,
            what="all published",
        )
        wait_for(lambda: broker.llen("jobs.normal") == 0, timeout=30, what="messages taken by the worker")
        wait_for(lambda: proxy.refused >= len(ids), timeout=30, what="the worker's claims refused")
        # time is the subject: a pause in which a job wrongly claimed or fetched would show
        time.sleep(2)
        assert Job.objects.filter(id__in=ids, status=JobStatus.QUEUED).count() == len(ids)
        assert target.requests_for("/bytes/") == []

        proxy.restore()
        back = time.monotonic()
        wait_all_final(ids, timeout=OUTAGE_BOUND_S, what="jobs after the database came back")
        # time is the subject: the jobs end within the outage bound after the
        # database comes back, not after a lease or a sweep
        assert time.monotonic() - back < OUTAGE_BOUND_S
    finally:
        proxy.stop()

    for i, job in enumerate(jobs):
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED, job.last_error
        assert attempt_history(job) == [(1, AttemptOutcome.SUCCEEDED, None)]
        assert job.result_sha256 == sha256(body_for(3000 + i))
        assert len(target.requests_for(f"/bytes/{3000 + i}")) == 1
    assert "message sent again" in _log(worker)
