"""One attempt end to end in this process: claim, fetch, store, receipt, and the job's next state."""

import hashlib
import threading
import time
from contextlib import contextmanager
from unittest import mock

import pytest
from django.conf import settings
from django.db import connections
from django.test import override_settings
from django.utils import timezone

from apps.jobs.cancel_requeue import job_cancel
from apps.jobs.claims import job_claim
from apps.jobs.models import Attempt, Job
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.redis_clients import cancel_flag_key, state_redis
from apps.results.storage import results_storage
from apps.scraping.attempt import job_run_attempt
from apps.scraping.leases import LeaseKeeper, lease_keeper
from tests.support.factories import job_make
from tests.support.procs import wait_for
from tests.support.target import body_for


def _attempt(job_id, worker="w:1:1"):
    """Run one attempt, then fold its receipt as the writer would (the writer process is not
    running here; the receipt also went to the Redis stream, flushed after each test)."""
    receipt = job_run_attempt(job_id=job_id, worker=worker)
    if receipt is not None:
        attempts_apply_finished([receipt])
    return receipt


@pytest.mark.django_db
def test_a_successful_attempt_stores_the_body_before_the_job_succeeds(tenant, target):
    job = job_make(tenant, target.url("/bytes/123456"))
    receipt = _attempt(job.id)
    job.refresh_from_db()
    assert receipt.outcome == "succeeded" and job.status == "succeeded"
    assert job.result_size == 123456 and job.result_sha256 == hashlib.sha256(body_for(123456)).hexdigest()
    assert job.result_http_status == 200 and job.result_content_type == "application/octet-stream"
    with results_storage().open(job.result_key, "rb") as fh:
        assert fh.read() == body_for(123456)
    attempt = Attempt.objects.get(job=job)
    assert (attempt.number, attempt.outcome, attempt.worker) == (1, "succeeded", "w:1:1")


@pytest.mark.django_db
def test_a_duplicate_message_does_nothing(tenant, target):
    job = job_make(tenant, target.url("/bytes/10"))
    assert _attempt(job.id) is not None
    assert _attempt(job.id, "w:1:2") is None
    assert len(target.requests_for("/bytes")) == 1


@pytest.mark.django_db
def test_a_404_fails_the_job_at_once(tenant, target):
    job = job_make(tenant, target.url("/status/404"), max_attempts=5)
    _attempt(job.id)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result_key) == ("failed", 1, None)
    assert job.last_error == {
        "class": "http_404",
        "message": "target answered 404 Not Found",
        "http_status": 404,
    }
    assert Attempt.objects.get(job=job).outcome == "failed_permanent"


@pytest.mark.django_db
def test_a_temporary_failure_goes_back_to_the_queue_while_attempts_remain(tenant, target):
    job = job_make(tenant, target.url("/retry-after/x?fail=5&after=30"), max_attempts=2)
    _attempt(job.id)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.published_at) == ("queued", 1, None)
    # time is the subject: a backoff's length: the 30 s Retry-After, measured
    # from the attempt's end on the database's clock
    assert 25 <= (job.not_before - Attempt.objects.get(job=job).finished_at).total_seconds() <= 31
    assert job.last_error["class"] == "http_429"


@pytest.mark.django_db
def test_the_last_temporary_failure_fails_the_job(tenant, target):
    job = job_make(tenant, target.url("/status/503"), max_attempts=1)
    _attempt(job.id)
    job.refresh_from_db()
    assert (job.status, job.last_error["class"]) == ("failed", "http_503")
    assert Attempt.objects.get(job=job).outcome == "failed_temporary"


@pytest.mark.django_db
@override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False)
def test_a_private_target_fails_permanently_without_being_contacted(tenant, target, caplog):
    job = job_make(tenant, target.url("/bytes/10").replace("127.0.0.1", "localhost"))
    _attempt(job.id)
    job.refresh_from_db()
    assert (job.status, job.last_error["class"]) == ("failed", "address_refused")
    assert target.requests == []
    # The tenant is not told what the name resolves to; the operator's log is.
    assert "127.0.0.1" not in job.last_error["message"] and "::1" not in job.last_error["message"]
    assert "localhost resolves to" in caplog.text and "127.0.0.1" in caplog.text


@pytest.mark.django_db
def test_a_storage_failure_is_a_temporary_failure(tenant, target, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    backend = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(blocker)},
    }
    job = job_make(tenant, target.url("/bytes/10"), max_attempts=3)
    with override_settings(STORAGES={**settings.STORAGES, "default": backend, "results": backend}):
        receipt = _attempt(job.id)
    job.refresh_from_db()
    assert (receipt.outcome, receipt.error_class, job.status) == (
        "failed_temporary",
        "storage_error",
        "queued",
    )


@pytest.mark.django_db(transaction=True)
def test_a_running_attempt_stops_soon_after_a_cancel(tenant, target):
    job = job_make(tenant, target.url("/drip?n=200&delay=0.05"))
    receipts = []

    def run() -> None:
        try:
            receipts.append(_attempt(job.id))
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    wait_for(lambda: target.requests_for("/drip"), 10, what="the fetch to start")
    assert job_cancel(job_id=job.id) == "cancel_requested"
    asked = time.monotonic()
    thread.join(10)
    # time is the subject: a stop within 2 s of the cancel, where the drip alone would take 10 s
    assert time.monotonic() - asked < 2
    job.refresh_from_db()
    assert receipts[0].outcome == "cancelled" and job.status == "cancelled"
    assert Attempt.objects.get(job=job).outcome == "cancelled"


@pytest.mark.django_db
def test_a_cancel_requested_before_the_claim_stops_the_job_before_the_target_is_asked(tenant, target):
    # The claim reads the cancel (the fetch asks Redis nothing of its own, NFR-11): a cancel that
    # races ahead of the claim leaves no attempt, and no request reaches the target.
    job = job_make(tenant, target.url("/bytes/10"))
    Job.objects.filter(id=job.id).update(cancel_requested_at=timezone.now())
    assert _attempt(job.id) is None
    assert target.requests == [] and not Attempt.objects.filter(job=job).exists()


@pytest.mark.django_db(transaction=True)
def test_a_cancel_flag_set_while_the_attempt_is_held_stops_it_at_the_watchers_next_look(tenant, target):
    # A cancel landing between the claim and the first byte is the watcher's to see, as during
    # the fetch: the attempt ends cancelled and no body is stored.
    job = job_make(tenant, target.url("/drip?n=200&delay=0.05"), timeout_s=30)
    keeper = lease_keeper()
    original = keeper.hold

    @contextmanager
    def hold_and_flag(**kw):
        with original(**kw) as handle:
            state_redis().set(cancel_flag_key(str(kw["job_id"]), kw["attempt"]), "1")
            yield handle

    with mock.patch.object(keeper, "hold", hold_and_flag):
        receipt = _attempt(job.id)
    assert (receipt.outcome, receipt.error_class) == ("cancelled", "cancelled")
    assert receipt.result is None
    job.refresh_from_db()
    assert job.status == "cancelled" and Attempt.objects.get(job=job).outcome == "cancelled"


@pytest.mark.django_db
def test_the_lease_keeper_renews_held_leases_and_flags_a_lost_one(tenant):
    job = job_make(tenant, "http://example.test/")
    claimed = job_claim(job_id=job.id, worker="w:1:1")
    keeper = LeaseKeeper(interval_s=3600)  # driven by hand below
    with keeper.hold(job_id=claimed.id, attempt=claimed.attempt, worker="w:1:1") as lease:
        before = Job.objects.get(id=job.id).lease_expires_at
        keeper.renew_all()
        assert Job.objects.get(id=job.id).lease_expires_at > before and not lease.lost.is_set()
        # The sweeper gave the job to someone else (a newer attempt): our renewal must fail.
        Job.objects.filter(id=job.id).update(attempts=2, lease_owner="other")
        keeper.renew_all()
        assert lease.lost.is_set()


@pytest.mark.django_db
def test_a_message_for_a_job_not_due_yet_puts_it_back_in_the_outbox_instead_of_dropping_it(tenant):
    """a published job whose not-before time has not come by the database's
    clock is not claimed, and it is not left published without a message either: its publish
    mark is cleared (its not-before time kept) so the publisher sends it again when it is due."""
    from datetime import timedelta

    from django.db.models.functions import Now

    job = job_make(tenant, "http://example.test/")
    Job.objects.filter(id=job.id).update(published_at=Now(), not_before=Now() + timedelta(seconds=60))
    not_before = Job.objects.get(id=job.id).not_before

    assert job_claim(job_id=job.id, worker="w:1:1") is None
    job.refresh_from_db()
    assert (job.status, job.attempts, job.published_at, job.not_before) == ("queued", 0, None, not_before)


@pytest.mark.django_db
def test_a_message_from_a_newer_publisher_with_arguments_this_release_does_not_know_runs(tenant, target):
    """Rolling upgrades: a newer publisher may add arguments to the scrape
    message; this worker runs the job rather than fail the message (which would strand it
    published until the sweeper's republish)."""
    from apps.scraping.tasks import scrape_job

    job = job_make(tenant, target.url("/bytes/77"))
    result = scrape_job.apply(
        kwargs={"job_id": str(job.id), "domain": "127.0.0.1", "timeout_s": 30, "a_later_argument": [1]}
    )
    assert result.successful(), result.traceback
    assert Attempt.objects.get(job=job).number == 1 and len(target.requests_for("/bytes/77")) == 1


@pytest.mark.django_db
@override_settings(SCRAPEJOBS_DOMAIN_ADAPTIVE=True)  # every answer is recorded for the adaptive rate
def test_an_attempt_costs_its_thread_two_redis_round_trips(tenant, target, monkeypatch):
    # NFR-11, docs/benchmarks.md: each round trip hands the interpreter lock to the worker's other
    # threads and waits to get it back, which is most of what a job costs its thread beyond the
    # fetch. The politeness gate's script, then one pipeline after the fetch with the slot's
    # release, the answer for the adaptive rate, the receipt and the nudges. A cancel is the
    # claim's and the lease keeper's to see, whose threads (renewals, the cancel watcher) are not
    # counted.
    import redis.connection

    sent: list[bytes] = []
    me = threading.get_ident()
    send = redis.connection.AbstractConnection.send_packed_command

    def counting(self, command, check_health=True):
        packed = b"".join(command) if isinstance(command, list) else bytes(command)
        if threading.get_ident() == me and not packed.startswith(b"*1\r\n$4\r\nPING"):  # health checks
            sent.append(packed)
        return send(self, command, check_health)

    _attempt(job_make(tenant, target.url("/bytes/10")).id)  # connections made, policy cached
    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    job = job_make(tenant, target.url("/bytes/11"))
    receipt = job_run_attempt(job_id=job.id, worker="w:1:1", domain=job.domain, timeout_s=job.timeout_s)
    assert receipt is not None and receipt.outcome == "succeeded"
    assert len(sent) == 2, [p[:80] for p in sent]
    assert b"EVALSHA" in sent[0] and not any(b"EXISTS" in p for p in sent)
    assert sent[1].count(b"EVAL\r\n") == 2 and b"ZREM" in sent[1] and b"LPUSH" in sent[1]
