"""Domain grouping and redirect hops: a policy may group every host of a
registrable domain under one budget (the public-suffix list the package ships), and a redirect
hop takes a token (and for another domain a slot) of the host it goes to, through the worker's
real path."""

from __future__ import annotations

import time
from urllib.parse import quote

import pytest
from django.utils import timezone

from apps.jobs.models import Attempt, Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.politeness.domains import registrable_domain
from apps.politeness.limiter import domain_permit_acquire
from apps.politeness.models import DomainPolicy
from apps.politeness.selectors import domain_limits_get, domain_state_get
from apps.scraping.attempt import job_run_attempt
from tests.e2e.fault_support import submit

pytestmark = pytest.mark.django_db

SLACK_S = 0.05


@pytest.mark.parametrize(
    ("host", "registrable"),
    [
        ("www.shop.com", "shop.com"),
        ("img.shop.co.uk", "shop.co.uk"),
        ("shop.com", "shop.com"),
        ("a.b.github.io", "b.github.io"),  # a private suffix of the list: each site its own
        ("127.0.0.1", "127.0.0.1"),  # an address stands for itself
        ("localhost", "localhost"),
    ],
)
def test_the_registrable_domain_comes_from_the_shipped_public_suffix_list(
    host: str, registrable: str
) -> None:
    assert registrable_domain(host) == registrable


def ask(host: str, holder: str):
    return domain_permit_acquire(domain=host, holder=holder, ticket=holder, slot_ttl_s=30)


def test_hosts_of_a_registrable_domain_share_one_budget_when_the_policy_says_so() -> None:
    DomainPolicy.objects.create(
        domain="shop.com", requests_per_second=0.001, burst=2, max_concurrency=100, grouping="registrable"
    )
    assert domain_limits_get(domain="img.shop.com").group == "shop.com"
    assert ask("www.shop.com", "a").granted and ask("img.shop.com", "b").granted
    refused = ask("shop.com", "c")
    assert not refused.granted and refused.reason == "rate" and refused.group == "shop.com"
    # Another registrable domain keeps its own budget (the defaults, unlimited in tests).
    assert ask("www.other.com", "d").granted


def test_without_grouping_each_host_has_its_own_budget() -> None:
    DomainPolicy.objects.create(domain="shop.com", requests_per_second=0.001, burst=1, max_concurrency=100)
    assert domain_limits_get(domain="www.shop.com").group == "www.shop.com"
    assert ask("shop.com", "a").granted and not ask("shop.com", "b").granted
    assert ask("www.shop.com", "c").granted  # a host policy covers that host only


def test_a_host_policy_wins_over_its_registrable_domains() -> None:
    DomainPolicy.objects.create(
        domain="shop.com", requests_per_second=1, burst=1, max_concurrency=1, grouping="registrable"
    )
    DomainPolicy.objects.create(domain="api.shop.com", requests_per_second=50, burst=50, max_concurrency=5)
    limits = domain_limits_get(domain="api.shop.com")
    assert (limits.group, limits.requests_per_second) == ("api.shop.com", 50)
    assert domain_limits_get(domain="www.shop.com").group == "shop.com"


def run(job: Job) -> Job:
    receipt = job_run_attempt(job_id=job.id, worker="w:1:1")
    assert receipt is not None
    attempts_apply_finished([receipt])
    job.refresh_from_db()
    return job


def published(tenant, url: str) -> Job:
    job = submit(tenant, url)
    Job.objects.filter(id=job.id).update(published_at=job.created_at)
    return job


def test_a_redirect_to_another_host_is_charged_there_and_deferred_when_it_has_no_token(
    make_tenant, target
) -> None:
    """127.0.0.1 is unlimited; localhost allows one request per 1.5 s. Two jobs whose URLs on
    127.0.0.1 redirect to localhost reach localhost 1.5 s apart: the hop was charged there. The
    second job's hop found no token: its attempt was deferred (not counted, NFR-24) rather than
    waiting in the thread, and its next attempt, from its own URL, got through."""
    DomainPolicy.objects.create(domain="localhost", requests_per_second=1 / 1.5, burst=1, max_concurrency=10)
    tenant = make_tenant()[0]
    landing = target.url("/bytes/7").replace("127.0.0.1", "localhost")
    first, second = (run(published(tenant, target.url(f"/go?to={landing}&n={i}"))) for i in range(2))
    assert first.status == JobStatus.SUCCEEDED
    # Not counted: max_attempts stays the caller's, the attempt is among the deferred ones.
    assert (second.status, second.attempts, second.deferred_attempts, second.max_attempts) == (
        JobStatus.QUEUED,
        1,
        1,
        5,
    )
    assert second.defer_reason == "domain_rate" and second.deferred_until == second.not_before
    assert list(Attempt.objects.filter(job=second).values_list("outcome", "error_class")) == [
        ("deferred", "redirect_deferred")
    ]
    # Back at its turn in the line, 1.5 s after the first job's request (not by not_before: inside
    # this test's transaction the fold's now() is the transaction's start).
    # time is the subject: the second job's token comes due
    time.sleep(max(0.0, target.requests_for("/bytes/7")[0][0] + 1.5 + SLACK_S - time.time()))
    Job.objects.filter(id=second.id).update(published_at=timezone.now(), not_before=None)
    second = run(second)
    assert (second.status, second.attempts, second.deferred_attempts, second.max_attempts) == (
        JobStatus.SUCCEEDED,
        2,
        1,
        5,
    )
    arrivals = [t for t, *_ in target.requests_for("/bytes/7")]
    assert len(arrivals) == 2
    assert arrivals[1] - arrivals[0] >= 1.5 - SLACK_S


def test_every_hop_of_a_redirect_chain_within_a_domain_takes_a_token_without_waiting_in_the_thread(
    make_tenant, target
) -> None:
    """2 requests/s, burst 1: /redirect/2 is three requests, its hops 0.5 s apart. A hop finding no token
    does not wait in the worker thread (it waited up to 2 s once): the attempt is deferred and the
    job's next attempt goes on from that hop, so that no request of the chain is sent twice (from
    its first URL again, at a burst of 1, the chain would never get through). The job's one slot
    (concurrency 1) is not asked for twice, or the chain would wait for itself."""
    DomainPolicy.objects.create(domain="127.0.0.1", requests_per_second=2, burst=1, max_concurrency=1)
    job = run(published(make_tenant()[0], target.url("/redirect/2")))
    for _ in range(10):
        if job.status != JobStatus.QUEUED:
            break
        # Its turn, 0.5 s after the chain's last request (not_before is the transaction's now()).
        # time is the subject: the next hop's token comes due
        time.sleep(max(0.0, target.requests_for("/redirect/")[-1][0] + 0.5 + SLACK_S - time.time()))
        Job.objects.filter(id=job.id).update(published_at=timezone.now(), not_before=None)
        job = run(job)
    history = list(Attempt.objects.filter(job=job).order_by("number").values_list("outcome", "error_class"))
    assert job.status == JobStatus.SUCCEEDED, (job.last_error, history, target.requests_for("/"))
    assert history[0] == ("deferred", "redirect_deferred")  # the first hop found no token
    assert history[-1][0] == "succeeded"
    assert {outcome for outcome, _ in history[:-1]} == {"deferred"}
    assert (job.max_attempts, job.deferred_attempts) == (5, len(history) - 1)
    paths = [path for _, path, *_ in target.requests_for("/redirect/")]
    assert paths == ["/redirect/2", "/redirect/1", "/redirect/0"], paths  # each once, in order
    # The hops took their tokens (the first request's is the worker's gate, not run here).
    arrivals = [t for t, *_ in target.requests_for("/redirect/")]
    assert arrivals[2] - arrivals[1] >= 0.5 - SLACK_S, arrivals


def test_an_answer_after_a_redirect_moves_the_host_that_gave_it(make_tenant, target) -> None:
    """127.0.0.1 redirects to localhost, which answers 429 with Retry-After: 30. The pause is
    localhost's, whose answer it was; 127.0.0.1 answered only the redirect and is not paused
    (the answer used to be charged to the job's own host)."""
    DomainPolicy.objects.create(domain="localhost", requests_per_second=100, burst=100, max_concurrency=10)
    landing = target.url("/retry-after/x?fail=5&after=30").replace("127.0.0.1", "localhost")
    job = run(published(make_tenant()[0], target.url("/go") + "?to=" + quote(landing, safe="")))
    assert job.status == JobStatus.QUEUED  # a temporary failure: retried later
    assert Attempt.objects.get(job=job).http_status == 429
    # time is the subject: a cooldown's length: the landing page's Retry-After
    # of 30 s, charged to localhost, not a few seconds
    assert domain_state_get(domain="localhost").cooldown_s > 20
    assert domain_state_get(domain="127.0.0.1").cooldown_s == 0
    refused = ask("localhost", "other")
    assert not refused.granted
    assert ask("127.0.0.1", "another").granted
