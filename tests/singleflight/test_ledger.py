"""Single-flight in the ledger: the decision, the fold that serves the parked
jobs, and the hand-overs, driven step by step through the same functions the worker, the writer,
the sweeper and the cancel call, against the real PostgreSQL."""

from __future__ import annotations

import time

import pytest

from apps.jobs.cancel_requeue import job_cancel
from apps.jobs.claims import job_claim
from apps.jobs.fetch_keys import normalised_url, request_fingerprint
from apps.jobs.intake import job_create
from apps.jobs.models import Attempt, AttemptOutcome, InFlightFetch, Job
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.jobs.receipts import AttemptFinished, ResultStored
from apps.jobs.singleflight import job_fetch_decide
from apps.jobs.sweeping import jobs_lose_expired_leases
from tests.support.factories import job_make

pytestmark = pytest.mark.django_db(transaction=True)

URL = "http://shop.example/price?id=7"
BODY = ResultStored(key="results/x", size=5, sha256="ab" * 32, content_type="text/plain", http_status=200)


def _job(tenant, url: str = URL, **kw) -> Job:
    return job_make(tenant, url, **{"max_age_s": 60, **kw})


def _elect_and_claim(job: Job):
    decision = job_fetch_decide(job_id=job.id)
    assert decision.kind == "fetch"
    claimed = job_claim(job_id=job.id, worker="w:1:1", fetch_key=decision.key)
    assert claimed is not None
    return claimed


def _finish(job: Job, attempt: int, outcome: str, **kw) -> None:
    receipt = AttemptFinished(
        job_id=str(job.id), attempt=attempt, outcome=outcome, finished_at=time.time(), duration_ms=3,
        worker="w:1:1", **kw,
    )  # fmt: skip
    assert attempts_apply_finished([receipt]).applied == 1


def _state(job: Job) -> tuple[str, int, bool]:
    job.refresh_from_db()
    return job.status, job.attempts, job.fetch_parked_at is not None


def test_the_fingerprint_normalises_what_never_reaches_the_target():
    same = [
        "HTTP://Shop.Example:80/a?b=1&a=2#top",
        "http://shop.example/a?b=1&a=2",
    ]
    assert {normalised_url(u) for u in same} == {"http://shop.example/a?b=1&a=2"}
    assert normalised_url("https://x.example:443") == "https://x.example/"
    assert normalised_url("https://x.example:8443/") == "https://x.example:8443/"

    def fp(**kw):
        return request_fingerprint(
            **{"method": "GET", "url": "http://a.example/", "headers": {}, "body": None, **kw}
        )

    assert fp(headers={"Accept": " text/html"}) == fp(headers={"accept": "text/html"})
    assert fp(url="http://a.example/?a=1&b=2") != fp(url="http://a.example/?b=2&a=1")  # query kept as is
    assert fp(headers={"Accept-Language": "fr"}) != fp()
    assert fp(body="x") != fp() and fp(body="") == fp()
    assert fp(method="POST") != fp()


def test_waiters_park_and_are_served_the_elected_fetch_with_their_own_attempt(tenant):
    elected, waiter, other_url = _job(tenant), _job(tenant), _job(tenant, URL + "&v=2")
    claimed = _elect_and_claim(elected)
    assert job_fetch_decide(job_id=waiter.id).kind == "parked"
    assert job_fetch_decide(job_id=other_url.id).kind == "fetch"
    assert _state(waiter) == ("queued", 0, True)
    # A parked job is not claimable: a duplicate message for it does nothing.
    assert job_claim(job_id=waiter.id, worker="w:2:2") is None

    _finish(elected, claimed.attempt, AttemptOutcome.SUCCEEDED, http_status=200, result=BODY)

    assert _state(waiter) == ("succeeded", 1, False)
    assert (waiter.result_key, waiter.result_sha256, waiter.result_size) == (BODY.key, BODY.sha256, BODY.size)
    attempt = Attempt.objects.get(job=waiter)
    assert (attempt.outcome, attempt.served_from_job, attempt.served_from_attempt) == (
        AttemptOutcome.SUCCEEDED, elected.id, 1,
    )  # fmt: skip
    assert waiter.final_published_at is None  # in the end-of-job outbox, like every final job
    assert list(InFlightFetch.objects.values_list("job_id", flat=True)) == [other_url.id]

    # Within max_age_s, a new identical job is served at once from the stored result.
    late = _job(tenant)
    assert job_fetch_decide(job_id=late.id).kind == "served"
    assert _state(late) == ("succeeded", 1, False)
    assert Attempt.objects.get(job=late).served_from_job == elected.id


def test_max_age_zero_always_fetches_and_an_old_result_is_not_reused(tenant):
    first = _job(tenant)
    _finish(first, _elect_and_claim(first).attempt, AttemptOutcome.SUCCEEDED, http_status=200, result=BODY)
    fresh, _ = job_create(tenant_id=tenant.id, url=URL, domain="shop.example", max_age_s=0)
    assert job_fetch_decide(job_id=fresh.id).kind == "fetch"
    first.refresh_from_db()
    Job.objects.filter(id=first.id).update(finished_at=first.finished_at.replace(year=2020))
    assert job_fetch_decide(job_id=_job(tenant).id).kind == "fetch"


def test_a_permanent_failure_fails_every_waiter_and_a_temporary_one_hands_over_to_one(tenant):
    elected, w1, w2 = _job(tenant), _job(tenant), _job(tenant)
    claimed = _elect_and_claim(elected)
    assert [job_fetch_decide(job_id=w.id).kind for w in (w1, w2)] == ["parked", "parked"]
    _finish(
        elected, claimed.attempt, AttemptOutcome.TEMPORARY, http_status=503, error_class="http_503", error="x"
    )
    # The elected job waits for its retry; exactly one waiter is back in the outbox, unparked.
    assert _state(elected)[0] == "queued"
    assert _state(w1) == ("queued", 0, False) and w1.published_at is None
    assert _state(w2) == ("queued", 0, True)

    taken = _elect_and_claim(w1)
    Job.objects.filter(id=elected.id).update(not_before=None)
    assert job_fetch_decide(job_id=elected.id).kind == "parked"  # its retry waits behind w1
    _finish(
        w1, taken.attempt, AttemptOutcome.PERMANENT, http_status=404, error_class="http_404", error="gone"
    )
    for job in (elected, w2):
        assert _state(job)[0] == "failed"
        assert job.last_error == {"class": "http_404", "message": "gone", "http_status": 404}
        last = Attempt.objects.filter(job=job).order_by("-number").first()
        assert (last.outcome, last.http_status, last.served_from_job) == (
            AttemptOutcome.PERMANENT,
            404,
            w1.id,
        )


def test_cancels_a_cancelled_waiter_leaves_the_others_and_a_cancelled_elected_job_hands_over(tenant):
    elected, w1, w2 = _job(tenant), _job(tenant), _job(tenant)
    assert job_fetch_decide(job_id=elected.id).kind == "fetch"  # elected, not yet claimed
    assert [job_fetch_decide(job_id=w.id).kind for w in (w1, w2)] == ["parked", "parked"]
    assert job_cancel(job_id=w1.id) == "cancelled"
    assert _state(w2) == ("queued", 0, True)
    assert InFlightFetch.objects.get().job_id == elected.id

    assert job_cancel(job_id=elected.id) == "cancelled"
    assert _state(w2) == ("queued", 0, False)
    claimed = _elect_and_claim(w2)
    # Cancelling the elected job while it runs: its cancelled attempt, once folded, hands over.
    w3 = _job(tenant)
    assert job_fetch_decide(job_id=w3.id).kind == "parked"
    assert job_cancel(job_id=w2.id) == "cancel_requested"
    _finish(w2, claimed.attempt, AttemptOutcome.CANCELLED, error_class="cancelled", error="cancelled")
    assert _state(w2)[0] == "cancelled" and _state(w3) == ("queued", 0, False)
    assert _state(w1)[0] == "cancelled" and Attempt.objects.filter(job=w1).count() == 0


def test_a_lost_lease_hands_the_fetch_over(tenant, settings):
    elected, waiter = _job(tenant), _job(tenant)
    _elect_and_claim(elected)
    assert job_fetch_decide(job_id=waiter.id).kind == "parked"
    Job.objects.filter(id=elected.id).update(lease_expires_at=elected.created_at)
    assert jobs_lose_expired_leases().requeued == 1
    assert _state(waiter) == ("queued", 0, False)
    assert not InFlightFetch.objects.exists()


def test_tenants_share_only_when_both_allow_it(make_tenant):
    a, b, c = (make_tenant()[0] for _ in range(3))
    for t in (a, b):
        type(t).objects.filter(id=t.id).update(share_fetches=True)
    ja = _job(a)
    _finish(ja, _elect_and_claim(ja).attempt, AttemptOutcome.SUCCEEDED, http_status=200, result=BODY)
    jb, jc = _job(b), _job(c)
    assert job_fetch_decide(job_id=jb.id).kind == "served"
    assert job_fetch_decide(job_id=jc.id).kind == "fetch"  # c does not share: its own fetch
    assert _state(jb)[0] == "succeeded" and jb.tenant_id == b.id


def test_a_fetch_many_jobs_wait_for_is_settled_in_bounded_statements(tenant, monkeypatch):
    """Every parked job is served, SERVE_CHUNK at a time, in the fold's transaction."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.jobs import singleflight

    monkeypatch.setattr(singleflight, "SERVE_CHUNK", 3)
    elected = _job(tenant)
    claimed = _elect_and_claim(elected)
    waiters = [_job(tenant) for _ in range(7)]
    assert {job_fetch_decide(job_id=w.id).kind for w in waiters} == {"parked"}
    with CaptureQueriesContext(connection) as queries:
        _finish(elected, claimed.attempt, AttemptOutcome.SUCCEEDED, http_status=200, result=BODY)
    assert [_state(w) for w in waiters] == [("succeeded", 1, False)] * 7
    serving = [q for q in queries.captured_queries if "FOR UPDATE OF j" in q["sql"]]
    assert len(serving) == 3  # 3 + 3 + 1
