"""Never lost, never stuck: real worker, writer and beat processes, real Redis and PostgreSQL, and
things killed on purpose (NFR-3, NFR-4, NFR-5, FR-7).

Leases and cadences are shortened through settings (``fault_support.FAST``), never by mocking
time. Each test would fail without the code it names: the sweeper, the republisher, the
conditional claim, the retry planner, the graceful stop, the webhook deliverer.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import redis
from django.conf import settings

from apps.jobs.models import AttemptOutcome, Job, JobStatus
from apps.jobs.sweeping import LEASE_EXPIRED, WORKER_STOPPED
from apps.webhooks.models import DeliveryStatus, WebhookAttempt, WebhookDelivery
from apps.webhooks.signing import SIGNATURE_HEADER, signature_verify
from tests.e2e.fault_support import (
    attempt_history,
    fast_env,
    sha256,
    stored_body,
    submit,
    unacked_holds,
    wait_all_final,
)
from tests.support.procs import wait_for
from tests.support.target import body_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _running(job: Job, attempt: int) -> bool:
    return Job.objects.filter(id=job.id, status=JobStatus.RUNNING, attempts=attempt).exists()


def test_a_worker_killed_mid_download_loses_its_attempt_and_the_job_succeeds_on_another_worker(
    services, make_tenant, target, tmp_path
):
    """NFR-4: the sweeper returns the job of a SIGKILLed worker to the queue once its lease
    expires; another worker finishes it; the history shows the lost attempt."""
    svc = services(**fast_env(tmp_path))
    svc.start("control")
    svc.start("beat")
    first = svc.start("worker", concurrency=4, name="first")
    tenant, _, _ = make_tenant()
    job = submit(tenant, target.url("/drip?n=8&delay=0.5"))

    wait_for(lambda: target.requests_for("/drip") and _running(job, 1), timeout=30, what="download started")
    first.kill()
    svc.start("worker", concurrency=4, name="second")
    wait_all_final([job.id], timeout=45)

    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert attempt_history(job) == [
        (1, AttemptOutcome.LOST, LEASE_EXPIRED),
        (2, AttemptOutcome.SUCCEEDED, None),
    ]
    assert stored_body(tmp_path, job) == b"x" * 8
    assert len(target.requests_for("/drip")) == 2


def test_every_queued_job_succeeds_after_the_broker_lost_all_its_messages(
    services, make_tenant, target, tmp_path
):
    """NFR-3: 200 jobs published to the broker, the broker database flushed before any worker
    ran: the sweeper republishes jobs published but never taken, and every one succeeds."""
    svc = services(**fast_env(tmp_path))
    svc.start("control")
    svc.start("beat")
    tenant, _, _ = make_tenant()
    jobs = [submit(tenant, target.url(f"/bytes/{100 + i}")) for i in range(200)]
    ids = [j.id for j in jobs]
    wait_for(
        lambda: Job.objects.filter(id__in=ids, published_at__isnull=False).count() == len(ids),
        timeout=30,
        what="all published",
    )

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    assert broker.llen("jobs.normal") > 0
    broker.flushdb()
    svc.start("worker", concurrency=20)
    wait_all_final(ids, timeout=120)

    for i, job in enumerate(jobs):
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED, job.last_error
        assert job.result_sha256 == sha256(body_for(100 + i))
        assert job.attempts == 1


def test_a_duplicate_message_for_a_job_is_a_no_op(services, make_tenant, target, tmp_path):
    """NFR-1: the publisher dies between sending and stamping, so the job is sent twice;
    the conditional claim makes the second message do nothing: one attempt, one result."""
    svc = services(**fast_env(tmp_path, SCRAPEJOBS_REPUBLISH_AFTER_S="600"))
    svc.start("control")
    svc.start("beat")
    tenant, _, _ = make_tenant()
    job = submit(tenant, target.url("/bytes/4096"))
    wait_for(lambda: Job.objects.filter(id=job.id, published_at__isnull=False).exists(), timeout=20)
    # What a publisher killed after its send and before its stamp leaves behind: a message in
    # the broker and a row that is still unpublished, which the next run sends again.
    Job.objects.filter(id=job.id).update(published_at=None)
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    wait_for(lambda: broker.llen("jobs.normal") == 2, timeout=20, what="two messages for one job")

    svc.start("worker", concurrency=4)
    wait_all_final([job.id], timeout=30)
    wait_for(lambda: broker.llen("jobs.normal") == 0, timeout=20, what="both messages consumed")
    time.sleep(1)  # the second message's task runs right after the first

    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert attempt_history(job) == [(1, AttemptOutcome.SUCCEEDED, None)]
    assert len(target.requests_for("/bytes/4096")) == 1
    assert stored_body(tmp_path, job) == body_for(4096)
    stored = tmp_path / job.result_key  # <prefix>/<nn>/<name>.<attempt>: the job's bodies side by side
    assert [p.name for p in stored.parent.glob(stored.name.rsplit(".", 1)[0] + ".*")] == [stored.name]
    assert stored.name.endswith(".1")


def test_temporary_failures_are_retried_and_permanent_ones_are_not(services, make_tenant, target, tmp_path):
    """NFR-3: 503 three times then 200 succeeds on attempt 4; 404 fails after one."""
    svc = services(**fast_env(tmp_path))
    svc.start_all(worker_concurrency=8)
    tenant, _, _ = make_tenant()
    flaky = submit(tenant, target.url("/flaky/a?fail=3&code=503"), max_attempts=5)
    missing = submit(tenant, target.url("/status/404"), max_attempts=5)
    wait_all_final([flaky.id, missing.id], timeout=60)

    flaky.refresh_from_db()
    missing.refresh_from_db()
    assert flaky.status == JobStatus.SUCCEEDED and flaky.attempts == 4
    assert [o for _, o, _ in attempt_history(flaky)] == [AttemptOutcome.TEMPORARY] * 3 + [
        AttemptOutcome.SUCCEEDED
    ]
    assert missing.status == JobStatus.FAILED and missing.attempts == 1
    assert attempt_history(missing) == [(1, AttemptOutcome.PERMANENT, "http_404")]
    assert len(target.requests_for("/status/404")) == 1


def test_a_429_with_retry_after_is_not_retried_before_the_target_allows(
    services, make_tenant, target, tmp_path
):
    """NFR-5: Retry-After: 3 wins over the (0.2 s) backoff, measured from the target's own log."""
    svc = services(**fast_env(tmp_path))
    svc.start_all(worker_concurrency=4)
    tenant, _, _ = make_tenant()
    job = submit(tenant, target.url("/retry-after/k?fail=1&after=3"))
    wait_all_final([job.id], timeout=40)

    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.attempts == 2
    times = [t for t, *_ in target.requests_for("/retry-after/k")]
    assert len(times) == 2
    assert times[1] - times[0] >= 3.0


@pytest.mark.serial  # the retry gaps' lengths are the subject: run alone
def test_the_gaps_of_a_long_retry_run_grow_and_stay_under_the_cap(services, make_tenant, target, tmp_path):
    """NFR-3: backoff ceilings base * 2**(n-1) up to the cap (here 0.5 s doubling to 3 s),
    full jitter. Every gap stays under the cap plus scheduling slack; the first under its own
    ceiling. With full jitter single gaps are random: that no later gap exceeds the first
    ceiling happens by chance less than once in 30,000 runs."""
    base, cap, slack = 0.5, 3.0, 1.0
    svc = services(
        **fast_env(
            tmp_path,
            SCRAPEJOBS_RETRY_BASE_S=str(base),
            SCRAPEJOBS_RETRY_CAP_S=str(cap),
            SCRAPEJOBS_PUBLISH_INTERVAL_S="0.1",
        )
    )
    svc.start_all(worker_concurrency=4)
    tenant, _, _ = make_tenant()
    job = submit(tenant, target.url("/flaky/long?fail=8&code=503"), max_attempts=9)
    wait_all_final([job.id], timeout=90)

    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.attempts == 9
    times = [t for t, *_ in target.requests_for("/flaky/long")]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    print("retry gaps:", [round(g, 2) for g in gaps])
    assert len(gaps) == 8
    # time is the subject: backoff lengths: every gap within the cap, the
    # first within the base, a later one past it
    assert all(g <= cap + slack for g in gaps)
    assert gaps[0] <= base + slack
    assert max(gaps[2:]) > base


def test_a_stopped_worker_gives_its_job_back_within_its_grace_period(services, make_tenant, target, tmp_path):
    """NFR-4: on SIGTERM a worker takes no new job and, when its running job does not finish
    within SCRAPEJOBS_WORKER_SHUTDOWN_GRACE_S (2 s here), gives the job back and exits; the job
    then succeeds on another worker."""
    svc = services(**fast_env(tmp_path, SCRAPEJOBS_LEASE_S="60"))
    svc.start("control")
    svc.start("beat")
    stopping = svc.start("worker", concurrency=4, name="stopping")
    tenant, _, _ = make_tenant()
    job = submit(tenant, target.url("/drip?n=16&delay=0.5"))  # 8 s of download
    wait_for(lambda: target.requests_for("/drip") and _running(job, 1), timeout=30, what="download started")

    asked = time.monotonic()
    os.killpg(stopping.pid, signal.SIGTERM)
    assert stopping.p is not None
    stopping.p.wait(timeout=10)
    took = time.monotonic() - asked

    # time is the subject: a stop within 6 s of SIGTERM (a 2 s grace),
    # where finishing the 8 s download would take longer
    assert took < 6, f"the worker took {took:.1f}s to stop"
    # Given back at once, not after the (60 s) lease: the attempt is lost, the job is queued.
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert attempt_history(job) == [(1, AttemptOutcome.LOST, WORKER_STOPPED)]
    svc.start("worker", concurrency=4, name="next")
    wait_all_final([job.id], timeout=45)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.attempts == 2


def _queued_messages_for(broker: redis.Redis, job: Job) -> int:
    return sum(str(job.id).encode() in raw for raw in broker.lrange("jobs.normal", 0, -1))


def test_a_busy_worker_leaves_the_next_message_in_the_broker_and_a_stopped_one_takes_none_with_it(
    services, make_tenant, target, tmp_path
):
    """NFR-8, NFR-4: a scrape worker takes a message only for a free thread (docs/design/dispatch.md):
    while its one thread is busy the second job's message stays on its queue, with no copy in the
    broker's unacknowledged set; a worker that stops meanwhile takes nothing with it, and the next
    worker runs the job without waiting for the sweeper (its republish bound is set beyond the
    test here). Before, the worker reserved that message and put it back as it stopped."""
    svc = services(**fast_env(tmp_path, SCRAPEJOBS_LEASE_S="60", SCRAPEJOBS_REPUBLISH_AFTER_S="600"))
    svc.start("control")
    svc.start("beat")
    stopping = svc.start("worker", concurrency=1, name="stopping")
    tenant, _, _ = make_tenant()
    busy = submit(tenant, target.url("/drip?n=16&delay=0.5"))  # 8 s: holds the one thread
    wait_for(lambda: target.requests_for("/drip") and _running(busy, 1), timeout=30, what="download started")
    held = submit(tenant, target.url("/bytes/32"))
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    wait_for(
        lambda: Job.objects.filter(id=held.id, published_at__isnull=False).exists(),
        timeout=30,
        what="the second job to be published",
    )
    # time is the subject: a pause in which a worker reserving messages would have taken it
    time.sleep(0.5)
    held.refresh_from_db()
    assert (held.status, held.attempts) == (JobStatus.QUEUED, 0)
    assert _queued_messages_for(broker, held) == 1  # on its queue, not in the busy worker
    assert not unacked_holds(broker, held)

    os.killpg(stopping.pid, signal.SIGTERM)
    assert stopping.p is not None
    stopping.p.wait(timeout=15)
    assert _queued_messages_for(broker, held) == 1  # still there once the worker is gone
    svc.start("worker", concurrency=4, name="next")
    wait_all_final([busy.id, held.id], timeout=45)
    busy.refresh_from_db()
    held.refresh_from_db()
    assert (busy.status, busy.attempts) == (JobStatus.SUCCEEDED, 2)  # given back at the grace's end
    assert (held.status, held.attempts) == (JobStatus.SUCCEEDED, 1)
    assert attempt_history(held) == [(1, AttemptOutcome.SUCCEEDED, None)]


def test_a_webhook_receiver_that_fails_twice_gets_the_signed_event_three_times(
    services, make_tenant, target, tmp_path
):
    """FR-7: non-2xx answers are retried, every attempt is in the log, and the signature
    verifies with the tenant's webhook secret."""
    svc = services(**fast_env(tmp_path, SCRAPEJOBS_WEBHOOK_RETRY_SCHEDULE_S="0.5,0.5,0.5"))
    svc.start_all(worker_concurrency=4)
    tenant, _, _ = make_tenant()
    job = submit(tenant, target.url("/bytes/10"), callback_url=target.url("/flaky/hook?fail=2&code=500"))

    wait_for(
        lambda: WebhookDelivery.objects.filter(job=job, status=DeliveryStatus.DELIVERED).exists(),
        timeout=40,
        what="webhook delivered",
    )

    job.refresh_from_db()
    received = target.requests_for("/flaky/hook")
    assert len(received) == 3
    for _at, _path, method, headers, body in received:
        assert method == "POST"
        assert json.loads(body) == {
            "id": str(job.id),
            "status": "succeeded",
            "finished_at": job.finished_at.isoformat().replace("+00:00", "Z"),
        }
        assert signature_verify(secret=tenant.webhook_secret, header=headers[SIGNATURE_HEADER], body=body)
    log = WebhookAttempt.objects.filter(delivery__job=job).order_by("number")
    assert [(a.number, a.status_code) for a in log] == [(1, 500), (2, 500), (3, 200)]
    assert all(a.duration_ms is not None for a in log)
