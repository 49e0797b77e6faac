"""The worker's gate before the claim, in this process (NFR-5 (politeness), NFR-5): a job
refused by its domain is deferred in the database without spending an attempt or contacting the
target; a granted one gives its slot back; a target's 429 slows its domain down."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from apps.jobs.claims import job_claim
from apps.jobs.intake import job_create
from apps.jobs.models import Attempt, Job, WaitingFor
from apps.jobs.outbox import job_defer_for_domain
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.politeness.limiter import domain_outcome_record
from apps.politeness.models import DomainPolicy
from apps.politeness.selectors import domain_state_get
from apps.redis_clients import state_redis
from apps.scraping.attempt import job_run_attempt
from apps.scraping.domain_turn import UNAVAILABLE_DEFER_S

pytestmark = pytest.mark.django_db

DOMAIN = "127.0.0.1"


def published_job(tenant, url: str, **kw) -> Job:
    """A job as a worker receives it: queued, its message sent (``published_at`` stamped)."""
    job = job_create(tenant_id=tenant.id, url=url, domain=DOMAIN, **kw)[0]
    Job.objects.filter(id=job.id).update(published_at=timezone.now())
    job.refresh_from_db()
    return job


def run(job: Job):
    receipt = job_run_attempt(job_id=job.id, worker="w:1:1")
    if receipt is not None:
        attempts_apply_finished([receipt])
    job.refresh_from_db()
    return receipt


def test_a_job_whose_domain_cools_down_waits_in_the_database_without_spending_an_attempt(tenant, target):
    job = published_job(tenant, target.url("/bytes/10"))
    domain_outcome_record(domain=DOMAIN, http_status=429, retry_after_s=2)
    asked = timezone.now()
    assert run(job) is None
    assert (job.status, job.attempts, job.published_at) == ("queued", 0, None)
    # time is the subject: a deferral's length: the 2 s Retry-After, within a few tenths either side
    assert 1.7 <= (job.not_before - asked).total_seconds() <= 2.2
    assert not Attempt.objects.filter(job=job).exists() and target.requests == []


def test_a_granted_job_runs_once_and_gives_its_concurrency_slot_back(tenant, target):
    DomainPolicy.objects.create(domain=DOMAIN, requests_per_second=1000, burst=1000, max_concurrency=1)
    first, second = (
        published_job(tenant, target.url("/bytes/10")),
        published_job(tenant, target.url("/bytes/20")),
    )
    assert run(first).outcome == "succeeded"
    assert domain_state_get(domain=DOMAIN).in_flight == 0
    assert run(second).outcome == "succeeded"  # the cap of 1 was free again
    assert (first.attempts, second.attempts) == (1, 1)


def test_the_slot_is_given_back_when_the_attempt_fails(tenant, target):
    DomainPolicy.objects.create(domain=DOMAIN, requests_per_second=1000, burst=1000, max_concurrency=1)
    job = published_job(tenant, target.url("/status/404"))
    assert run(job).outcome == "failed_permanent"
    assert domain_state_get(domain=DOMAIN).in_flight == 0


def test_a_429_with_retry_after_defers_the_next_job_of_its_domain_only(tenant, target):
    throttled = published_job(tenant, target.url("/retry-after/gate?fail=1&after=2"), max_attempts=3)
    assert run(throttled).http_status == 429
    same_domain = published_job(tenant, target.url("/bytes/10"))
    assert run(same_domain) is None and same_domain.attempts == 0 and same_domain.published_at is None
    elsewhere = target.base_url.replace("127.0.0.1", "localhost") + "/bytes/11"
    other = job_create(tenant_id=tenant.id, url=elsewhere, domain="localhost")[0]
    assert run(other).outcome == "succeeded"
    assert len(target.requests_for("/bytes/10")) == 0


def test_a_duplicate_message_for_a_finished_job_spends_no_token(tenant, target):
    job = published_job(tenant, target.url("/bytes/10"))
    assert run(job).outcome == "succeeded"
    tokens_after_first = domain_state_get(domain=DOMAIN).tokens
    assert run(job) is None
    assert domain_state_get(domain=DOMAIN).tokens == pytest.approx(tokens_after_first, abs=1e-3)
    assert len(target.requests_for("/bytes/10")) == 1


def test_only_a_queued_and_published_job_is_deferred(tenant, target):
    unpublished = job_create(tenant_id=tenant.id, url=target.url("/bytes/1"), domain=DOMAIN)[0]
    assert job_defer_for_domain(job_id=unpublished.id, wait_s=5, reason=WaitingFor.DOMAIN_RATE) is False
    running = published_job(tenant, target.url("/bytes/2"))
    assert job_claim(job_id=running.id, worker="w") is not None
    assert job_defer_for_domain(job_id=running.id, wait_s=5, reason=WaitingFor.DOMAIN_RATE) is False
    waiting = published_job(tenant, target.url("/bytes/3"))
    assert job_defer_for_domain(job_id=waiting.id, wait_s=5, reason=WaitingFor.DOMAIN_RATE) is True
    waiting.refresh_from_db()
    assert (waiting.status, waiting.attempts, waiting.published_at) == ("queued", 0, None)
    assert (
        job_defer_for_domain(job_id=waiting.id, wait_s=5, reason=WaitingFor.DOMAIN_RATE) is False
    )  # a duplicate message


def test_without_redis_a_job_waits_rather_than_hitting_its_target_unthrottled(tenant, target):
    job = published_job(tenant, target.url("/bytes/10"))
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):  # nothing listens on port 1
        state_redis.cache_clear()
        try:
            assert job_run_attempt(job_id=job.id, worker="w:1:1") is None
        finally:
            state_redis.cache_clear()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.published_at) == ("queued", 0, None)
    assert job.not_before > timezone.now() + timedelta(seconds=UNAVAILABLE_DEFER_S - 2)
    assert target.requests == []


@pytest.mark.django_db(transaction=True)
def test_a_job_refused_before_the_publishers_stamp_commits_is_still_deferred(tenant, target):
    """The publisher sends a message, then stamps ``published_at`` and commits, holding the row
    lock throughout: a worker can refuse the job in between. The deferral must wait for that
    commit, or the late stamp would leave the job published with no message (stuck until the
    sweeper). The publisher's transaction is run for real in a thread."""
    job = job_create(tenant_id=tenant.id, url=target.url("/bytes/1"), domain=DOMAIN)[0]
    locked, stamped = threading.Event(), threading.Event()

    def publisher() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute("SELECT id FROM jobs_job WHERE id = %s FOR UPDATE SKIP LOCKED", [str(job.id)])
                locked.set()
                time.sleep(0.5)  # "sending the message"
                cur.execute(
                    "UPDATE jobs_job SET published_at = now() WHERE id = %s AND published_at IS NULL",
                    [str(job.id)],
                )
            stamped.set()
        finally:
            connection.close()

    thread = threading.Thread(target=publisher)
    thread.start()
    assert locked.wait(5)
    assert job_defer_for_domain(job_id=job.id, wait_s=5, reason=WaitingFor.DOMAIN_RATE) is True
    assert stamped.is_set()  # it waited for the publisher's commit
    thread.join()
    job.refresh_from_db()
    assert (job.status, job.published_at) == ("queued", None)
    assert job.not_before > timezone.now() + timedelta(seconds=3)


def test_a_message_naming_the_jobs_domain_is_gated_and_claimed_without_reading_the_row_first(tenant, target):
    # the publisher puts the domain and timeout in the message, so the only statement
    # before the fetch is the claim itself; the slot goes back with the receipt's round trip.
    from django.test.utils import CaptureQueriesContext

    DomainPolicy.objects.create(domain=DOMAIN, requests_per_second=1000, burst=1000, max_concurrency=1)
    job = published_job(tenant, target.url("/bytes/10"))
    with CaptureQueriesContext(connection) as queries:
        receipt = job_run_attempt(job_id=job.id, worker="w:1:1", domain=DOMAIN, timeout_s=job.timeout_s)
    assert receipt is not None and receipt.outcome == "succeeded"
    # Through Django: only the domain's policy (cached afterwards for POLICY_CACHE_S). The
    # single-flight read of the job's request (decided before the gate, so a job served or
    # parked asks the domain for nothing; one primary-key read, the only one for a job with
    # max_age_s 0) and the claim are prepared statements on the raw connection, which
    # tests/test_job_budget.py counts server-side: one of each per job, no other read of the row.
    statements = [q["sql"] for q in queries.captured_queries]
    assert len(statements) == 1 and "politeness_domainpolicy" in statements[0], statements
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("running", 1)  # claimed; the writer folds the receipt
    assert domain_state_get(domain=DOMAIN).in_flight == 0


def test_a_duplicate_message_naming_the_domain_gives_its_slot_back_and_fetches_nothing(tenant, target):
    DomainPolicy.objects.create(domain=DOMAIN, requests_per_second=1000, burst=1000, max_concurrency=1)
    job = published_job(tenant, target.url("/bytes/10"))
    for _ in range(2):
        job_run_attempt(job_id=job.id, worker="w:1:1", domain=DOMAIN, timeout_s=job.timeout_s)
    assert domain_state_get(domain=DOMAIN).in_flight == 0
    assert len(target.requests_for("/bytes/10")) == 1
    job.refresh_from_db()
    assert job.attempts == 1


def _answers_recorded_apart(monkeypatch) -> list[dict]:
    """The answers recorded with a round trip of their own, after the receipt's (still made)."""
    from apps.scraping import domain_turn

    calls: list[dict] = []
    record = domain_turn.domain_outcome_record

    def spy(**kw):
        calls.append(kw)
        return record(**kw)

    monkeypatch.setattr(domain_turn, "domain_outcome_record", spy)
    return calls


def test_a_429_is_recorded_in_the_round_trip_that_hands_in_the_receipt(tenant, target, monkeypatch):
    # NFR-11: the gate has just read the domain's policy, so the answer rides along with the
    # slot's release and the receipt instead of costing the worker a Redis round trip more.
    apart = _answers_recorded_apart(monkeypatch)
    job = published_job(tenant, target.url("/retry-after/ride?fail=1&after=30"), max_attempts=3)
    receipt = job_run_attempt(job_id=job.id, worker="w:1:1", domain=DOMAIN, timeout_s=job.timeout_s)
    assert receipt is not None and receipt.http_status == 429
    assert apart == []
    # time is the subject: a cooldown's length: the target's Retry-After of 30 s took effect
    assert 28 <= domain_state_get(domain=DOMAIN).cooldown_s <= 30
    assert domain_state_get(domain=DOMAIN).in_flight == 0


def test_an_answer_whose_policy_is_not_at_hand_is_recorded_after_the_receipt(tenant, target, monkeypatch):
    # No read of PostgreSQL inside the receipt's round trip (the receipt must not wait for the
    # pool while the database is away, NFR-3): without the policy cached, the answer goes apart.
    from apps.politeness import limiter

    monkeypatch.setattr(limiter, "domain_limits_cached", lambda *, domain: None)
    apart = _answers_recorded_apart(monkeypatch)
    job = published_job(tenant, target.url("/retry-after/apart?fail=1&after=30"), max_attempts=3)
    receipt = job_run_attempt(job_id=job.id, worker="w:1:1", domain=DOMAIN, timeout_s=job.timeout_s)
    assert receipt is not None and receipt.http_status == 429
    assert [(c["domain"], c["http_status"], c["retry_after_s"]) for c in apart] == [(DOMAIN, 429, 30.0)]
    # time is the subject: a cooldown's length: the target's Retry-After of 30 s, less the test's own run
    assert 28 <= domain_state_get(domain=DOMAIN).cooldown_s <= 30


@override_settings(SCRAPEJOBS_DOMAIN_ADAPTIVE=True)  # every answer is recorded (off in the tests)
def test_an_answer_redis_refuses_to_record_costs_neither_the_receipt_nor_the_attempt(tenant, target, caplog):
    # The answer's window is no list (a damaged key): its script fails inside the receipt's
    # pipeline, which still hands the receipt in; the attempt ends as it would have.
    from apps.politeness.keys import domain_keys
    from apps.writer.streams import STREAM

    r = state_redis()
    r.set(domain_keys(DOMAIN).outcomes, "not a list")
    before = r.xlen(STREAM)
    job = published_job(tenant, target.url("/bytes/10"))
    receipt = job_run_attempt(job_id=job.id, worker="w:1:1", domain=DOMAIN, timeout_s=job.timeout_s)
    assert receipt is not None and receipt.outcome == "succeeded"
    assert r.xlen(STREAM) == before + 1
    assert any("failed" in m and "WRONGTYPE" in m for m in caplog.messages), caplog.messages
    assert domain_state_get(domain=DOMAIN).in_flight == 0
    attempts_apply_finished([receipt])
    job.refresh_from_db()
    assert job.status == "succeeded"


# Committed rows: the fetches take seconds, and a lease renewal runs on a connection of its own,
# which must see the job (inside the test's transaction it would not: lease_lost). The test
# process renews only by hand (tests/conftest.py), so this holds for a renewal a test asks for.
@pytest.mark.django_db(transaction=True)
@override_settings(SCRAPEJOBS_DOMAIN_ADAPTIVE=True)  # every answer is recorded (off in the tests)
def test_a_jobs_own_short_timeout_says_nothing_of_the_site_but_a_default_one_does(
    tenant, target, monkeypatch
):
    """NFR-5: a tenant's timeout_s shorter than the default is its own impatience, not the site's
    slowness: it leaves the site's shared adaptive window alone; a timeout at least the default
    one (made 2 s here, so that the test waits 2 s, not 30) is counted against the site."""
    from apps.jobs import models as job_models
    from apps.politeness.keys import domain_keys

    window = domain_keys(DOMAIN).outcomes
    monkeypatch.setattr(job_models, "JOB_TIMEOUT_DEFAULT_S", 2)
    own = run(published_job(tenant, target.url("/slow?delay=4&n=own"), timeout_s=1, max_attempts=1))
    assert own.error_class == "timeout"  # the job's own answer: it timed out
    assert state_redis().lrange(window, 0, -1) == []  # the site's window never heard of it
    default = run(published_job(tenant, target.url("/slow?delay=4&n=default"), timeout_s=2, max_attempts=1))
    assert default.error_class == "timeout"
    assert state_redis().lrange(window, 0, -1) == ["1"]  # one bad answer, counted for every tenant
