"""NFR-8: a scrape worker holds no message it has no free thread for, and a thread that frees up
gets its next message at once (scrapejobs/task_end_wake.py, docs/design/dispatch.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from django.conf import settings

from apps.jobs.models import Attempt, Job, JobStatus
from apps.politeness.models import DomainPolicy
from tests.e2e.fault_support import submit, wait_all_final
from tests.support.procs import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def open_domain(transactional_db: None) -> None:
    DomainPolicy.objects.create(
        domain="127.0.0.1", requests_per_second=1000, burst=1000, max_concurrency=100, obey_robots=False
    )


def _running() -> int:
    return Job.objects.filter(status=JobStatus.RUNNING).count()


def test_a_worker_whose_threads_are_busy_leaves_the_next_messages_to_another_worker(
    services, make_tenant, target, tmp_path: Path, open_domain: None
):
    """Two threads busy with 20 s fetches: the two other jobs' messages stay in the broker, where
    a second worker takes them at once. With Celery's prefetch the first worker reserved them and
    they waited for its fetches (20 s at five times the seed's peak, docs/benchmarks.md)."""
    svc = services(SCRAPEJOBS_RESULTS_DIR=str(tmp_path / "results")).start_all(worker_concurrency=2)
    tenant, _, _ = make_tenant()
    ids = [submit(tenant, target.url(f"/slow?delay=20&n={i}")).id for i in range(4)]
    wait_for(lambda: _running() == 2, timeout=60, interval=0.05, what="two jobs running")
    wait_for(
        lambda: Job.objects.filter(id__in=ids, published_at__isnull=False).count() == 4,
        timeout=30,
        interval=0.05,
        what="all four published",
    )
    assert redis.Redis.from_url(settings.CELERY_BROKER_URL).llen("jobs.normal") == 2
    svc.start("worker", concurrency=2, name="second")
    # Well before the first two fetches end (20 s): the other two were free to be taken.
    wait_for(
        lambda: _running() == 4, timeout=15, interval=0.05, what="the other two running in the second worker"
    )
    workers = {
        w.split("@")[0] for w in Attempt.objects.filter(job_id__in=ids).values_list("worker", flat=True)
    }
    assert workers == {"worker", "second"}
    wait_all_final(ids, timeout=60)
    assert Job.objects.filter(id__in=ids, status=JobStatus.SUCCEEDED).count() == 4


@pytest.mark.serial
def test_a_thread_that_frees_up_takes_its_next_message_at_once(
    services, make_tenant, target, tmp_path: Path, open_domain: None
):
    """One thread, eight quick jobs: between one attempt's end and the next one's claim the worker
    only asks the broker and claims. Without the wake-up at each task's end, its event loop
    asked for the next message at its next tick, up to a second later."""
    services(SCRAPEJOBS_RESULTS_DIR=str(tmp_path / "results")).start_all(worker_concurrency=1)
    tenant, _, _ = make_tenant()
    ids = [submit(tenant, target.url(f"/bytes/{100 + i}")).id for i in range(8)]
    wait_all_final(ids, timeout=60)
    attempts = sorted(Attempt.objects.filter(job_id__in=ids).values_list("started_at", "finished_at"))
    assert len(attempts) == 8 and all(finished is not None for _, finished in attempts)
    gaps = [(b[0] - a[1]).total_seconds() for a, b in zip(attempts, attempts[1:], strict=False) if a[1]]
    print("gaps between attempts:", [round(g, 3) for g in gaps])
    # time is the subject: seven gaps of a broker round trip and a claim each, where a wait for
    # the event loop's next tick (up to 1 s each) would add up to seconds
    assert sum(gaps) < 1.0, gaps
