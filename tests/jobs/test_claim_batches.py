"""A scrape worker's claims made in batches (apps.jobs.claims.ClaimBatcher, NFR-11): one
statement for every claim waiting, each requesting thread answered as its own claim would
answer it, the statement made by one of the claiming threads in turn. Committed
(transaction=True): each thread has a connection of its own."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import psycopg
import pytest
from django.db import connections
from django.utils import timezone

from apps.jobs import claims
from apps.jobs.claims import ClaimBatcher, job_claim
from apps.jobs.models import Attempt, Job
from tests.support.factories import job_make
from tests.support.procs import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class _HeldFirstBatch(ClaimBatcher):
    """A batcher whose first batch waits for ``release``: the requests made meanwhile are all in
    the second batch (``sizes``: each batch's number of requests; ``threads``: the thread that
    made each batch's statement)."""

    def __init__(self, wait_s: float = 30):
        super().__init__(wait_s=wait_s)
        self.release = threading.Event()
        self.sizes: list[int] = []
        self.threads: list[int] = []
        self.first_started = threading.Event()
        original = self._claim_batch

        def claim_batch(batch):
            self.sizes.append(len(batch))
            self.threads.append(threading.get_ident())
            if len(self.sizes) == 1:
                self.first_started.set()
                assert self.release.wait(30)
            return original(batch)

        self._claim_batch = claim_batch  # type: ignore[method-assign]


def _claim_all(
    batcher: ClaimBatcher, requests: list[tuple[uuid.UUID, str]], idents: set[int] | None = None
) -> dict[int, object]:
    """Each request ``(job id, worker)`` from a thread of its own; the answers by request index
    (a row, None, or the exception raised). ``idents``: filled with the threads' idents."""
    answers: dict[int, object] = {}

    def run(i: int, job_id: uuid.UUID, worker: str) -> None:
        if idents is not None:
            idents.add(threading.get_ident())
        try:
            answers[i] = batcher.claim(job_id, worker=worker, fetch_key=None)
        except Exception as e:  # noqa: BLE001 - the answer under test
            answers[i] = e

    threads = [threading.Thread(target=run, args=(i, j, w)) for i, (j, w) in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return answers


def test_claims_waiting_together_are_made_in_one_batch_each_as_its_own(tenant) -> None:
    jobs = [job_make(tenant, f"http://batch.test/{n}") for n in range(12)]
    batcher = _HeldFirstBatch()
    opener = threading.Thread(target=lambda: batcher.claim(jobs[0].id, worker="w:1:0", fetch_key=None))
    opener.start()
    assert batcher.first_started.wait(10)
    # Eleven claims arrive while the first batch is in the database: one batch for all of them.
    answers: dict[int, object] = {}
    eleven: set[int] = set()
    waiting = threading.Thread(
        target=lambda: answers.update(
            _claim_all(batcher, [(j.id, f"w:1:{n}") for n, j in enumerate(jobs[1:], 1)], eleven)
        )
    )
    waiting.start()
    wait_for(lambda: len(batcher._pending) == 11, 10, what="the eleven claims to wait")
    batcher.release.set()
    opener.join(10)
    waiting.join(30)
    assert batcher.sizes == [1, 11]
    # The first statement was the opener's own; the second, one of the eleven's, handed the lead.
    assert batcher.threads[0] == opener.ident and batcher.threads[1] in eleven
    assert all(isinstance(row, tuple) for row in answers.values()), answers
    for n, job in enumerate(jobs):
        job.refresh_from_db()
        assert (job.status, job.attempts, job.lease_owner) == ("running", 1, f"w:1:{n}")
        assert Attempt.objects.get(job=job).worker == f"w:1:{n}"


def test_a_second_request_for_a_job_in_the_same_batch_is_not_claimable(tenant) -> None:
    job = job_make(tenant, "http://batch.test/twice")
    other = job_make(tenant, "http://batch.test/once")
    batcher = _HeldFirstBatch()
    threading.Thread(target=lambda: batcher.claim(other.id, worker="w:1:9", fetch_key=None)).start()
    assert batcher.first_started.wait(10)
    answers: dict[int, object] = {}
    waiting = threading.Thread(
        target=lambda: answers.update(_claim_all(batcher, [(job.id, "w:1:1"), (job.id, "w:1:2")]))
    )
    waiting.start()
    wait_for(lambda: len(batcher._pending) == 2, 10, what="the two claims to wait")
    batcher.release.set()
    waiting.join(30)
    assert batcher.sizes == [1, 2]
    claimed = [i for i, row in answers.items() if isinstance(row, tuple)]
    assert len(claimed) == 1 and answers[1 - claimed[0]] is None
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("running", 1)
    assert Attempt.objects.filter(job=job).count() == 1


def test_a_batch_answers_each_job_as_the_single_claim_would(tenant) -> None:
    due = job_make(tenant, "http://batch.test/due")
    cancelled = job_make(tenant, "http://batch.test/cancelled")
    later = job_make(tenant, "http://batch.test/later")
    taken = job_make(tenant, "http://batch.test/taken")
    Job.objects.filter(id=cancelled.id).update(cancel_requested_at=timezone.now())
    # Published, but its retry time has not come: put back in the outbox, not claimed.
    Job.objects.filter(id=later.id).update(
        published_at=timezone.now(), not_before=timezone.now() + timedelta(hours=1)
    )
    Job.objects.filter(id=taken.id).update(status="running", attempts=1)
    answers = _claim_all(
        ClaimBatcher(wait_s=30),
        [(j.id, "w:1:1") for j in (due, cancelled, later, taken)] + [(uuid.uuid4(), "w:1:1")],
    )
    assert isinstance(answers[0], tuple) and answers[0][0] == 1  # attempt 1
    assert [answers[i] for i in (1, 2, 3, 4)] == [None, None, None, None]
    later.refresh_from_db()
    assert later.published_at is None and later.not_before is not None and later.status == "queued"
    assert Job.objects.get(id=cancelled.id).status == "queued"
    assert Attempt.objects.filter(job__in=[cancelled, later, taken]).count() == 0


def test_a_batch_the_database_refused_raises_its_error_in_every_waiting_thread(tenant, monkeypatch) -> None:
    jobs = [job_make(tenant, f"http://batch.test/down/{n}") for n in range(3)]

    def down(self):
        raise psycopg.OperationalError("connection refused")

    monkeypatch.setattr(type(connections["default"]), "ensure_connection", down)
    batcher = ClaimBatcher(wait_s=30)
    answers = _claim_all(batcher, [(j.id, "w:1:1") for j in jobs])
    assert all(isinstance(e, psycopg.OperationalError) for e in answers.values()), answers
    monkeypatch.undo()
    # Nobody is left leading: the next claim goes through.
    assert isinstance(batcher.claim(jobs[0].id, worker="w:1:1", fetch_key=None), tuple)
    assert Job.objects.get(id=jobs[0].id).status == "running"


def test_job_claim_goes_through_the_batcher_of_a_scrape_worker(tenant, monkeypatch) -> None:
    job = job_make(tenant, "http://batch.test/worker")
    monkeypatch.setattr(claims, "_batcher", None)
    claims.claims_batch()
    used: list[int] = []
    batch = claims._batcher._claim_batch  # type: ignore[union-attr]

    def counted(requests) -> None:
        used.append(len(requests))
        batch(requests)

    monkeypatch.setattr(claims._batcher, "_claim_batch", counted)
    claimed = job_claim(job_id=job.id, worker="w:1:1")
    assert used == [1] and claimed is not None
    assert (claimed.id, claimed.attempt, claimed.url) == (job.id, 1, job.url)
    assert claimed.share_fetches is not None and claimed.obey_robots is not None  # the tenant's, read
    assert job_claim(job_id=job.id, worker="w:1:2") is None  # a duplicate message


def test_a_claim_alone_is_made_at_once_on_its_own_thread(tenant) -> None:
    job = job_make(tenant, "http://batch.test/alone")
    batcher = _HeldFirstBatch()
    batcher.release.set()
    before = {t.ident for t in threading.enumerate()}
    row = batcher.claim(job.id, worker="w:1:1", fetch_key=None)
    assert isinstance(row, tuple) and row[0] == 1
    assert batcher.threads == [threading.get_ident()]  # no thread of the batcher's
    assert {t.ident for t in threading.enumerate()} == before
    assert batcher._pending == [] and not batcher._leading


def test_a_claim_that_waits_past_wait_s_is_refused_and_leaves_the_line(tenant) -> None:
    held = job_make(tenant, "http://batch.test/held")
    late = job_make(tenant, "http://batch.test/late")
    batcher = _HeldFirstBatch(wait_s=0.3)  # the time is the subject: how long a claim may wait
    opener = threading.Thread(target=lambda: batcher.claim(held.id, worker="w:1:0", fetch_key=None))
    opener.start()
    assert batcher.first_started.wait(10)
    with pytest.raises(psycopg.OperationalError, match="no claim decision"):
        batcher.claim(late.id, worker="w:1:1", fetch_key=None)
    assert batcher._pending == []
    batcher.release.set()
    opener.join(10)
    assert batcher.sizes == [1] and not batcher._leading  # nothing left to lead
    late.refresh_from_db()
    assert (late.status, late.attempts) == ("queued", 0)
    assert Job.objects.get(id=held.id).status == "running"


def test_a_forked_child_starts_with_nobody_leading(tenant) -> None:
    job = job_make(tenant, "http://batch.test/forked")
    batcher = ClaimBatcher(wait_s=30)
    # As a child finds it after a fork in the middle of its parent's statement: another
    # process's id, a lead held by a thread that does not exist here, a request waiting.
    batcher._pid, batcher._leading = -1, True
    batcher._pending.append(claims._ClaimRequest(uuid.uuid4(), "w:0:0", None))
    assert isinstance(batcher.claim(job.id, worker="w:1:1", fetch_key=None), tuple)
    assert batcher._pending == [] and not batcher._leading
