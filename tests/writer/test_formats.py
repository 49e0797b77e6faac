"""The receipt's wire format: the compact array the workers write now, and the JSON
object they wrote before, which the writer still applies (receipts already in a stream, or
replayed from the dead receipts, when the compact format shipped)."""

from __future__ import annotations

import json

import pytest

from apps.jobs.models import Attempt, Job, JobStatus
from apps.jobs.receipts import AttemptFinished, ResultStored, receipt_decode, receipt_encode
from apps.writer.flush import writer_flush_once
from apps.writer.selectors import dead_receipts_list
from apps.writer.streams import FIELD, STREAM
from apps.writer.streams import writer_redis as state_redis
from tests.writer.helpers import RunningJob, new_id, receipt, running_jobs_create

ODD = 'quote " backslash \\ tab \t newline \n unicode é ✓ 🙂 and a NUL-free end'


@pytest.mark.parametrize(
    "r",
    [
        receipt(new_id(), 1),
        receipt(new_id(), 3, "failed_temporary", retry_after_s=12.5, error=ODD, worker="w@h:1"),
        AttemptFinished(
            job_id=new_id(), attempt=2, outcome="failed_permanent", finished_at=1.0, duration_ms=0
        ),
        AttemptFinished(
            job_id=new_id(),
            attempt=1,
            outcome="succeeded",
            finished_at=1767225600.123456,
            duration_ms=7,
            result=ResultStored(key="k", size=0, sha256="0" * 64, content_type=None, http_status=204),
        ),
        AttemptFinished(  # a rendered attempt (FR-32): its subrequest counts appended
            job_id=new_id(),
            attempt=1,
            outcome="succeeded",
            finished_at=1.5,
            duration_ms=900,
            subrequests_made=12,
            subrequests_blocked=3,
        ),
    ],
)
def test_both_wire_formats_decode_to_the_same_receipt(r: AttemptFinished) -> None:
    assert receipt_decode(receipt_encode(r)) == r
    assert receipt_decode(json.dumps(r.to_dict())) == r  # the object form, as before issue #7
    assert len(receipt_encode(r)) < len(json.dumps(r.to_dict(), separators=(",", ":")))


def test_a_plain_receipt_has_the_first_layouts_fields_only() -> None:
    """A plain attempt's receipt is byte for byte what it was before rendered attempts existed:
    a writer of the previous release reads it, and the per-job bytes are unchanged."""
    plain = receipt_encode(receipt(new_id(), 1))
    assert len(json.loads(plain)) == 12
    rendered = AttemptFinished(
        job_id=new_id(),
        attempt=1,
        outcome="succeeded",
        finished_at=1.0,
        duration_ms=1,
        subrequests_made=2,
        subrequests_blocked=1,
    )
    assert json.loads(receipt_encode(rendered))[12:] == [2, 1]
    # After deferrals (NFR-24), their count, after the rendered and traced fields' places.
    after_deferrals = AttemptFinished(
        job_id=new_id(),
        attempt=4,
        outcome="failed_temporary",
        finished_at=1.0,
        duration_ms=1,
        deferred_before=3,
    )
    assert json.loads(receipt_encode(after_deferrals))[12:] == [None, None, None, 3]
    assert receipt_decode(receipt_encode(after_deferrals)).counted_attempt == 1


@pytest.mark.parametrize(
    "raw",
    ["", "{not json", "[]", "null", "7", '"text"', "{}", '{"job_id": "x"}', '[2, "x", 1]', '[1, "x"]']
    + ['[1, 5, 1, "succeeded", 1.0, 1, "", null, null, null, null, null]']  # a job id must be text
    + ['[1, "x", "1", "succeeded", 1.0, 1, "", null, null, null, null, null]'],  # attempt an int
)
def test_anything_else_is_refused(raw: str) -> None:
    with pytest.raises((ValueError, TypeError, KeyError)):
        receipt_decode(raw)


@pytest.mark.django_db(transaction=True)
def test_the_writer_applies_old_and_compact_receipts_side_by_side() -> None:
    """An object-form receipt left in the stream by a worker of the previous release is applied
    like a compact one; an old-form copy of a compact receipt (same natural key) is folded into
    it and acknowledged with it. Odd text survives both ways into the attempt row."""
    old, new = (RunningJob(id=new_id(), attempt=1, max_attempts=5) for _ in range(2))
    running_jobs_create([old, new])
    r = state_redis()
    r.xadd(STREAM, {FIELD: json.dumps(receipt(old.id, 1, "failed_permanent", error=ODD).to_dict())})
    r.xadd(STREAM, {FIELD: receipt_encode(receipt(new.id, 1))})
    r.xadd(STREAM, {FIELD: json.dumps(receipt(new.id, 1, "failed_permanent").to_dict())})  # duplicate

    stats = writer_flush_once()

    assert (stats.read, stats.applied, stats.acked, stats.dead) == (3, 2, 3, 0)
    assert r.xlen(STREAM) == 0
    failed = Job.objects.get(id=old.id)
    assert failed.status == JobStatus.FAILED
    assert failed.last_error is not None and failed.last_error["message"] == ODD
    assert Attempt.objects.get(job_id=old.id, number=1).error == ODD
    assert Job.objects.get(id=new.id).status == JobStatus.SUCCEEDED  # the first of the key won


@pytest.mark.django_db(transaction=True)
def test_a_dead_receipt_shows_its_receipt_in_either_format() -> None:
    """The admin's dead-receipt list decodes both forms; a compact receipt the writer cannot
    decode (an unknown version) is shown raw."""
    r = state_redis()
    job_id = new_id()
    r.xadd(STREAM, {FIELD: '[99, "x", 1]'})
    writer_flush_once()
    [d] = dead_receipts_list()
    assert d.receipt is None and d.raw == '[99, "x", 1]' and "undecodable" in d.error
    # A valid receipt for a job that does not exist is not an error (it is stale), so shape one
    # by hand as the dead-receipt list would find it.
    r.xadd("sj:receipts:dead", {FIELD: receipt_encode(receipt(job_id, 2)), "error": "e"})
    r.xadd("sj:receipts:dead", {FIELD: json.dumps(receipt(job_id, 3).to_dict()), "error": "e"})
    shown = [(d.receipt or {}).get("attempt") for d in dead_receipts_list()]
    assert shown == [3, 2, None]


# --- Rolling upgrades ------------------------------------------------------


def _newer_worker_receipts(r: AttemptFinished) -> list[str]:
    """What a worker of a later release writes: the same receipt with fields this release does not
    know, appended to the compact array (and to its nested result), or as extra object keys."""
    compact = json.loads(receipt_encode(r))
    compact += ["a later field", {"nested": [1, 2]}]
    if compact[11] is not None:
        compact[11] = [*compact[11], "a later result field"]
    obj = r.to_dict() | {"later_field": 3}
    if obj["result"] is not None:
        obj["result"] = obj["result"] | {"etag": "x"}
    return [json.dumps(compact), json.dumps(obj)]


def test_a_newer_workers_receipt_decodes_to_the_fields_this_release_knows() -> None:
    stored = ResultStored(key="k", size=3, sha256="0" * 64, content_type="text/html", http_status=200)
    for r in (
        receipt(new_id(), 2, "failed_temporary", retry_after_s=4.0),
        receipt(new_id(), 1, result=stored),
    ):
        for raw in _newer_worker_receipts(r):
            assert receipt_decode(raw) == r


@pytest.mark.django_db(transaction=True)
def test_the_writer_applies_a_newer_workers_receipts_and_sets_none_aside() -> None:
    """Before: a receipt with a field this writer does not know failed to decode, was retried and
    ended in the dead receipts; its job stayed `running` until the sweeper spent an attempt."""
    jobs = [RunningJob(id=new_id(), attempt=1, max_attempts=3) for _ in range(2)]
    running_jobs_create(jobs)
    r = state_redis()
    compact, _ = _newer_worker_receipts(receipt(jobs[0].id, 1))
    _, obj = _newer_worker_receipts(receipt(jobs[1].id, 1, "failed_permanent", error="gone"))
    r.xadd(STREAM, {FIELD: compact})
    r.xadd(STREAM, {FIELD: obj})

    stats = writer_flush_once()

    assert (stats.read, stats.applied, stats.acked, stats.dead) == (2, 2, 2, 0)
    assert dead_receipts_list() == []
    assert Job.objects.get(id=jobs[0].id).status == JobStatus.SUCCEEDED
    assert Job.objects.get(id=jobs[1].id).status == JobStatus.FAILED
