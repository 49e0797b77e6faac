"""A crawl through faults (NFR-41, with NFR-3 and NFR-4): its worker SIGKILLed while pages are
being fetched, and the one Redis server that holds both the broker (database 1) and the service's
state (database 0) killed and restarted, while the crawl runs. Every page ends final, none is
fetched more often than its job's attempts say, the crawl takes exactly ``max_pages`` pages and
completes. Real processes, leases and cadences shortened through settings (``fault_support.FAST``);
the Redis is our own (``PersistentRedis``: append-only, as production Redis should run), because the
machine's cannot be restarted from a test. Every target is on loopback."""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from apps.crawls.models import Crawl
from apps.jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from tests.e2e.fault_support import PersistentRedis, fast_env
from tests.support.procs import Proc, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SITE = 127  # pages of the binary-tree site (tests/support/target.py's /site)
MAX_PAGES = 40
MAX_ATTEMPTS = 6  # room for a page lost to the killed worker and again to the Redis restart
DEADLINE_S = 240.0  # bounds a hang only: the loop ends when the crawl does


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[PersistentRedis]:
    datadir = tmp_path / "redis"
    datadir.mkdir()
    server = PersistentRedis(datadir)
    server.start()
    yield server
    server.kill()


def _running_fetched(crawl_id: str, target) -> Job | None:
    """A page job of the crawl that is running and whose request the target has received."""
    asked = {path for _, path, _, _, _ in target.requests_for("/site/")}
    for job in Job.objects.filter(batch_id=crawl_id, status=JobStatus.RUNNING):
        if urlsplit(job.url).path in asked:
            return job
    return None


def test_a_crawl_survives_a_killed_worker_and_a_restarted_redis_with_every_page_final_and_exact(
    services, api, target, tmp_path, own_redis
):
    results_dir = tmp_path / "results"
    svc = services(**fast_env(results_dir, REDIS_URL=own_redis.url, SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S="0.3"))
    # The slots below are also a supervisor that restarts a process that died on its own, as
    # systemd or Kubernetes would (Celery exits on some broker connection losses during a restart).
    slots: dict[str, Proc] = {"control": svc.start("control"), "beat": svc.start("beat")}
    slots["worker"] = svc.start("worker", concurrency=4, name="first")
    # Every page answers after 0.5 s, so pages are mid-fetch whenever a fault comes.
    seed = target.url(f"/site/0?delay=0.5&n={SITE}")
    r = api.post(
        "/api/v1/crawls",
        {
            "seeds": [seed],
            "max_pages": MAX_PAGES,
            "exclude": ["/private*"],
            "job": {"max_attempts": MAX_ATTEMPTS},
            "sitemaps": "skip",  # every job here is a page (the site has no sitemap)
        },
        format="json",
    )
    assert r.status_code == 202, r.content
    crawl_id = r.json()["id"]

    # Fault 1: the worker is SIGKILLed while one of its pages is being fetched.
    victim = wait_for(
        lambda: _running_fetched(crawl_id, target), 90, interval=0.05, what="a page being fetched"
    )
    assert isinstance(victim, Job)
    slots["worker"].kill()
    slots["worker"] = svc.start("worker", concurrency=4, name="second")
    # Fault 2: halfway through the crawl, Redis (broker and state) is killed and restarted.
    wait_for(
        lambda: Crawl.objects.get(id=crawl_id).pages >= MAX_PAGES // 2,
        120,
        interval=0.1,
        what="half the pages",
    )
    own_redis.kill()
    # time is the subject: Redis stays down a second
    time.sleep(1)
    own_redis.start()

    crashed: list[str] = []
    started = time.monotonic()
    while Crawl.objects.get(id=crawl_id).status == "running" and time.monotonic() - started < DEADLINE_S:
        for slot, proc in list(slots.items()):
            if not proc.alive():
                crashed.append(slot)
                slots[slot] = svc.start(slot) if slot != "worker" else svc.start("worker", concurrency=4)
        # time is the subject: the supervision loop's interval (it restarts crashed processes)
        time.sleep(0.2)
    print(
        f"\ncrawl through faults: {time.monotonic() - started:.0f}s after the restart; restarted: {crashed}"
    )

    crawl = Crawl.objects.get(id=crawl_id)
    assert crawl.status == "completed" and crawl.pages == MAX_PAGES
    state = api.get(f"/api/v1/crawls/{crawl_id}").json()
    assert state["status"] == "completed"
    assert state["pages"] == {
        "total": MAX_PAGES,
        "queued": 0,
        "running": 0,
        "succeeded": MAX_PAGES,
        "failed": 0,
        "cancelled": 0,
        "erased": 0,
    }
    assert state["discovery"]["over_limit"] > 0  # the site has far more pages than the limit

    # The exact final state of every job: succeeded, its attempts numbered 1..n, every one before
    # the last lost (to the kill or the restart, never failed otherwise), the last succeeded, and
    # its stored body the page the target serves.
    jobs = list(Job.objects.filter(batch_id=crawl_id))
    assert len(jobs) == MAX_PAGES
    fetched = Counter(path for _, path, _, _, _ in target.requests_for("/"))
    paths = {urlsplit(j.url).path for j in jobs}
    assert len(paths) == MAX_PAGES  # one job per page
    assert set(fetched) - {"/robots.txt"} == paths  # nothing fetched that is not a page of the crawl
    for job in jobs:
        history = list(
            Attempt.objects.filter(job=job).order_by("number").values_list("number", "outcome", flat=False)
        )
        assert job.status == JobStatus.SUCCEEDED, (job.url, history)
        assert [n for n, _ in history] == list(range(1, job.attempts + 1))
        assert [o for _, o in history] == [AttemptOutcome.LOST] * (job.attempts - 1) + [
            AttemptOutcome.SUCCEEDED
        ]
        assert 1 <= job.attempts <= MAX_ATTEMPTS
        # At most one request per attempt: a lost attempt may have died before or after asking.
        path = urlsplit(job.url).path
        assert 1 <= fetched[path] <= job.attempts, (path, fetched[path], history)
        body = (results_dir / job.result_key).read_bytes()
        assert hashlib.sha256(body).hexdigest() == job.result_sha256
        assert f"<h1>site {path.rsplit('/', 1)[1]}</h1>".encode() in body
    # The page whose fetch the kill cut short was lost once and fetched again.
    victim.refresh_from_db()
    assert Attempt.objects.get(job=victim, number=1).outcome == AttemptOutcome.LOST
    assert fetched[urlsplit(victim.url).path] >= 2
