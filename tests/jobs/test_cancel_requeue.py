"""Cancel and requeue (FR-1 to FR-7 "POST /jobs/{id}/cancel", FR-8; FR-6 and FR-9 in REQUIREMENTS.md):
a cancel stops only the attempt it was asked for, and its answer always matches what the job
does next, even when a retry is being planned at the same instant."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import connections

from apps.jobs.cancel_requeue import job_cancel, jobs_requeue
from apps.jobs.claims import job_claim
from apps.jobs.intake import job_create
from apps.jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.jobs.receipts import AttemptFinished
from tests.support.procs import wait_for

FINAL = ("succeeded", "failed", "cancelled")


def _temporary_failure(job_id: object, attempt: int) -> AttemptFinished:
    return AttemptFinished(
        job_id=str(job_id),
        attempt=attempt,
        outcome=AttemptOutcome.TEMPORARY,
        finished_at=time.time(),
        duration_ms=5,
        worker="w:1:1",
        http_status=503,
        error_class="http_503",
        error="503",
    )


def _in_thread(fn: Callable[[], object], barrier: threading.Barrier, out: list[object]) -> threading.Thread:
    """``fn`` on its own connection, started together with the other side of the race."""

    def run() -> None:
        try:
            barrier.wait()
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - the main thread reports it
            out.append(e)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _race_cancel_against_a_retry(tenant: object, n: int) -> tuple[object, Job]:
    job = job_create(tenant_id=tenant.id, url=f"http://example.test/{n}", domain="example.test")[0]  # type: ignore[attr-defined]
    claimed = job_claim(job_id=job.id, worker="w:1:1")
    assert claimed is not None
    receipt = _temporary_failure(job.id, claimed.attempt)
    barrier = threading.Barrier(2)
    folded: list[object] = []
    answer: list[object] = []
    threads = [
        _in_thread(lambda: attempts_apply_finished([receipt]), barrier, folded),
        _in_thread(lambda: job_cancel(job_id=job.id), barrier, answer),
    ]
    for t in threads:
        t.join(30)
    assert not isinstance(folded[0], BaseException), folded
    job.refresh_from_db()
    return answer[0], job


@pytest.mark.django_db(transaction=True)
def test_a_cancel_racing_a_planned_retry_never_answers_final_for_a_job_that_will_run_again(tenant):
    """Two connections, many rounds: the writer folds a temporary failure (the job goes back to
    `queued` for a retry) while the API cancels it. Whichever comes first, the job ends
    `cancelled`, and the answer says what happened: `cancel_requested` (it was running) or
    `cancelled` (it was queued). A `final` answer (409) would leave a job that runs again."""
    rounds = 150
    answers: Counter[object] = Counter()
    for n in range(rounds):
        answer, job = _race_cancel_against_a_retry(tenant, n)
        answers[answer] += 1
        assert answer in ("cancelled", "cancel_requested"), (n, answer, job.status)
        assert job.status == JobStatus.CANCELLED, (n, answer, job.status)
        assert Attempt.objects.get(job=job).outcome == AttemptOutcome.TEMPORARY
    assert sum(answers.values()) == rounds


@pytest.mark.django_db(transaction=True)
def test_a_running_cancel_flag_stops_only_its_own_attempt(tenant):
    """The Redis flag a cancel sets names the attempt it stops: a requeued job's next attempt
    does not see it, even though no one cleared it (Redis may be down during the requeue)."""
    from apps.redis_clients import cancel_flag_key, state_redis

    job = job_create(tenant_id=tenant.id, url="http://example.test/x", domain="example.test")[0]
    claimed = job_claim(job_id=job.id, worker="w:1:1")
    assert claimed is not None and claimed.attempt == 1
    assert job_cancel(job_id=job.id) == "cancel_requested"
    assert state_redis().exists(cancel_flag_key(str(job.id), 1))
    assert not state_redis().exists(cancel_flag_key(str(job.id), 2))


@pytest.mark.django_db
def test_a_cancel_of_a_running_job_still_holds_while_redis_is_down(tenant, settings):
    """The row records the cancel; without the flag the attempt runs to its end, and its receipt
    ends the job `cancelled` (no 500 for the caller)."""
    from apps.redis_clients import state_redis

    job = job_create(tenant_id=tenant.id, url="http://example.test/x", domain="example.test")[0]
    assert job_claim(job_id=job.id, worker="w:1:1") is not None
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    state_redis.cache_clear()
    try:
        assert job_cancel(job_id=job.id) == "cancel_requested"
    finally:
        state_redis.cache_clear()
    attempts_apply_finished([_temporary_failure(job.id, 1)])
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


# --- With the real worker process ----------------------------------------------------------


@pytest.mark.e2e
def test_a_job_cancelled_while_running_and_requeued_runs_its_next_attempt_to_success(
    services, make_tenant, target
):
    """the cancel of attempt 1 must not stop attempt 2 after the admin's requeue."""
    _tenant, _token, api = make_tenant()
    services().start_all(worker_concurrency=4)
    # About 3 s of dripping: long enough to cancel while it runs, short enough for attempt 2.
    url = target.url("/drip?n=60&delay=0.05")
    response = api.post("/api/v1/jobs", {"url": url}, format="json")
    assert response.status_code == 202, response.content
    job_id = response.json()["id"]
    wait_for(lambda: target.requests_for("/drip"), 30, what="the worker to reach the target")

    cancel = api.post(f"/api/v1/jobs/{job_id}/cancel")
    assert cancel.status_code == 202 and cancel.json()["cancel_requested"] is True
    wait_for(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] in FINAL, 20, what="the cancel")
    assert api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "cancelled"

    # What the admin's Requeue action and the dead letters call.
    assert jobs_requeue(job_ids=[job_id]) == 1
    wait_for(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] in FINAL, 30, what="attempt 2")
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert (job["status"], job["attempts"]) == ("succeeded", 2)
    attempts = api.get(f"/api/v1/jobs/{job_id}/attempts").json()["items"]
    assert [(a["number"], a["outcome"]) for a in attempts] == [(1, "cancelled"), (2, "succeeded")]
    assert len(target.requests_for("/drip")) == 2
    assert Job.objects.get(id=job_id).result_size == 60
