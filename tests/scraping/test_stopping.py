"""A running attempt stops promptly on a cancel or a lost lease even while its fetch is blocked
waiting for the target (FR-1 to FR-7: "the worker stops at its next check"): the lease keeper's
watcher breaks the read off instead of waiting for it to end."""

import threading
import time

import pytest
from django.db import connections

from apps.jobs.cancel_requeue import job_cancel
from apps.jobs.claims import job_claim
from apps.jobs.models import Attempt, Job
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.redis_clients import cancel_flag_key, state_redis
from apps.scraping.attempt import job_run_attempt
from apps.scraping.leases import LeaseKeeper, lease_keeper
from tests.support.factories import job_make
from tests.support.procs import wait_for

FINAL = ("succeeded", "failed", "cancelled")


def _attempt_in_thread(job_id) -> tuple[threading.Thread, list]:
    """One attempt in its own thread, its receipt folded as the writer would."""
    receipts: list = []

    def run() -> None:
        try:
            receipt = job_run_attempt(job_id=job_id, worker="w:1:1")
            receipts.append(receipt)
            if receipt is not None:
                attempts_apply_finished([receipt])
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, receipts


def _join_within(thread: threading.Thread, seconds: float) -> None:
    asked = time.monotonic()
    thread.join(30)
    elapsed = time.monotonic() - asked
    # time is the subject: a stop within the caller's bound (1.5 s),
    # where the target would answer only after 30 s
    assert not thread.is_alive() and elapsed < seconds, f"the attempt took {elapsed:.2f}s to stop"


@pytest.mark.django_db(transaction=True)
def test_a_cancel_stops_an_attempt_still_waiting_for_the_targets_headers(tenant, target):
    job = job_make(tenant, target.url("/slow?delay=30"), timeout_s=60)
    thread, receipts = _attempt_in_thread(job.id)
    wait_for(lambda: target.requests_for("/slow"), 10, what="the fetch to reach the target")
    time.sleep(0.7)  # past the fetch's last check before it blocked: only the watcher can see it now
    assert job_cancel(job_id=job.id) == "cancel_requested"
    _join_within(thread, 1.5)  # the target answers only after 30 s
    job.refresh_from_db()
    assert (receipts[0].outcome, receipts[0].error_class) == ("cancelled", "cancelled")
    assert job.status == "cancelled" and Attempt.objects.get(job=job).outcome == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_a_lost_lease_stops_an_attempt_still_waiting_for_the_targets_headers(tenant, target):
    job = job_make(tenant, target.url("/slow?delay=30"), timeout_s=60)
    thread, receipts = _attempt_in_thread(job.id)
    wait_for(lambda: target.requests_for("/slow"), 10, what="the fetch to reach the target")
    # The sweeper gave the job to a newer attempt; the next renewal is refused.
    Job.objects.filter(id=job.id).update(attempts=2, lease_owner="other")
    lease_keeper().renew_all()  # what the keeper thread does on its next tick
    _join_within(thread, 1.5)
    assert (receipts[0].outcome, receipts[0].error_class) == ("failed_temporary", "lease_lost")


@pytest.mark.django_db
def test_the_watcher_stops_only_the_held_jobs_whose_cancel_flag_is_set(tenant):
    keeper = LeaseKeeper(interval_s=3600, watch_interval_s=3600)  # driven by hand below
    jobs = [job_make(tenant, f"http://example.test/{n}") for n in range(3)]
    claims = [job_claim(job_id=j.id, worker="w:1:1") for j in jobs]
    with (
        keeper.hold(job_id=claims[0].id, attempt=1, worker="w:1:1") as kept,
        keeper.hold(job_id=claims[1].id, attempt=1, worker="w:1:1") as cancelled,
        keeper.hold(job_id=claims[2].id, attempt=1, worker="w:1:1") as also_kept,
    ):
        keeper.watch_all()
        assert not any(h.cancelled.is_set() or h.interrupt.fired for h in (kept, cancelled, also_kept))
        state_redis().set(cancel_flag_key(str(cancelled.job_id), cancelled.attempt), "1")
        keeper.watch_all()
        assert cancelled.cancelled.is_set() and cancelled.interrupt.fired
        assert not any(h.cancelled.is_set() or h.interrupt.fired for h in (kept, also_kept))


# --- With the real worker process ----------------------------------------------------------


@pytest.mark.e2e
def test_a_worker_stops_a_fetch_waiting_for_headers_soon_after_a_cancel_through_the_api(
    services, make_tenant, target
):
    _tenant, _token, api = make_tenant()
    services().start_all(worker_concurrency=4)
    response = api.post("/api/v1/jobs", {"url": target.url("/slow?delay=30"), "timeout_s": 60}, format="json")
    assert response.status_code == 202, response.content
    job_id = response.json()["id"]
    wait_for(lambda: target.requests_for("/slow"), 30, what="the worker to reach the target")
    assert api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "running"
    time.sleep(0.7)  # the fetch is now blocked waiting for headers

    cancel = api.post(f"/api/v1/jobs/{job_id}/cancel")
    assert cancel.status_code == 202 and cancel.json()["cancel_requested"] is True
    asked = time.monotonic()
    wait_for(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] in FINAL, 10, what="the job to end")
    # time is the subject: a stop within 3 s of the cancel, where the target would answer only after 30 s
    assert time.monotonic() - asked < 3
    assert api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "cancelled"
    attempts = api.get(f"/api/v1/jobs/{job_id}/attempts").json()["items"]
    assert [(a["outcome"], a["error_class"]) for a in attempts] == [("cancelled", "cancelled")]
