"""Write receipts: what a worker reports after it claimed a job (FR-W1 to FR-W4).

A receipt is a compact JSON-able record keyed by its natural key ``(job_id, attempt)``. Applying
the same receipt twice changes nothing, and a receipt whose attempt is no longer the job's
current one cannot move the job (the attempt number is the fencing token; see
``apps.jobs.receipt_fold.attempts_apply_finished``).

On the wire (``receipt_encode`` / ``receipt_decode``) a receipt is a JSON array whose first
element is the format version, the fields in a fixed order after it: about half the bytes of the
JSON object and a third of the decoding time, which the writer pays for every receipt.
The object form (``to_dict``, with ``"kind"``) is what receipts looked like before; it still
decodes, so receipts already in a stream or in the dead letters when this shipped still apply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import orjson

# The compact format's version: the first element of the array. A new layout gets a new number
# and a branch in receipt_decode; the old numbers keep decoding.
COMPACT_V1 = 1
# Rolling upgrades: workers and the writer of two releases run side by side, so
# a new field is only ever appended, after these, and is optional. A writer applies the fields it
# knows and ignores the ones after them (a newer worker's); a newer writer reading an older
# receipt takes a missing trailing field as its default. Only a layout that cannot be read that
# way gets a new version number, which an older writer sets aside as a dead receipt.
V1_FIELDS = 12  # the version and the eleven fields of the first layout
RESULT_FIELDS = 5
# The result's fields a writer of this release reads: the first layout's and those appended since.
RESULT_FIELDS_KNOWN = 9


@dataclass(frozen=True)
class ResultStored:
    key: str
    size: int
    sha256: str
    content_type: str | None
    http_status: int
    # The URL that gave the stored body after redirects, when it is not the job's own (FR-25);
    # appended: older receipts lack it, older writers ignore it.
    final_url: str | None = None
    # The target's response headers, bounded and masked (apps.scraping.fetched.response_headers_kept).
    headers: dict[str, str] | None = None
    # The fetch key this body answers (apps.jobs.singleflight), stored by the fold with the
    # success so that later jobs can be served it (FR-15): set by the worker for a job claimed
    # without a decision (``max_age_s`` 0, whose claim no longer writes it). Appended (its place
    # always held, null when unset): an older writer ignores it, an older worker's receipt lacks it.
    fetch_key: str | None = None
    # Re-fetching (FR-33, FR-34, docs/revalidation.md), for a job that asked: whether the body
    # differs from the tenant's previous success of the key, and that job; on a 304, the job
    # whose body was kept (``revalidated_from``) and when that body was fetched (``stored_at``,
    # Unix seconds: the result's age). On the wire one appended element, always in its place:
    # null for a job that did not ask (five bytes), else the four as an array; an older writer
    # ignores it.
    changed: bool | None = None
    previous_job: str | None = None
    revalidated_from: str | None = None
    stored_at: float | None = None


@dataclass(frozen=True)
class AttemptFinished:
    job_id: str
    attempt: int
    outcome: str  # AttemptOutcome value
    finished_at: float  # Unix seconds
    duration_ms: int
    worker: str = ""
    http_status: int | None = None
    error_class: str | None = None
    error: str | None = None
    # Seconds the target asked us to wait (Retry-After), already converted from an HTTP date.
    retry_after_s: float | None = None
    result: ResultStored | None = field(default=None)
    # The URL that gave the answer (after a redirect, maybe another host's): the worker feeds
    # that host's adaptive rate with it. The worker's own: never sent (receipt_encode leaves it).
    answered_url: str | None = field(default=None, compare=False)
    # A rendered attempt's subresource requests (FR-32): made, and of those blocked. None for a
    # plain fetch, whose receipt then has the first layout's fields only.
    subrequests_made: int | None = None
    subrequests_blocked: int | None = None
    # The attempt span's W3C traceparent (FR-29, docs/tracing.md): the writer's fold links to it.
    # None when tracing is off, and then the receipt carries no such field.
    trace_context: str | None = field(default=None, compare=False)
    # The job's deferred attempts before this one (NFR-24), as its claim read them: the fold plans
    # a retry's backoff on the attempts that count (``counted_attempt``), as the sweeper does.
    # Appended after trace_context, only when not 0: a plain attempt's receipt is unchanged.
    deferred_before: int = 0

    kind = "attempt_finished"

    @property
    def counted_attempt(self) -> int:
        """This attempt's number among the job's attempts that count (deferrals do not)."""
        return self.attempt - self.deferred_before

    @property
    def natural_key(self) -> tuple[str, int]:
        return (self.job_id, self.attempt)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = self.kind
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AttemptFinished:
        """The object form; keys this release does not know (a newer worker's) are ignored."""
        known = {k: v for k, v in d.items() if k in _ATTEMPT_KEYS}
        result = known.pop("result", None)
        stored = ResultStored(**{k: v for k, v in result.items() if k in _RESULT_KEYS}) if result else None
        return cls(**known, result=stored)


_ATTEMPT_KEYS = frozenset(f.name for f in fields(AttemptFinished))
_RESULT_KEYS = frozenset(f.name for f in fields(ResultStored))


def receipt_encode(r: AttemptFinished) -> bytes:
    """The receipt as the compact JSON array (version first; the result, if any, as a nested
    array), as UTF-8 bytes."""
    res = r.result
    # Appended after the first layout's fields (see V1_FIELDS), and only when there is something
    # to say: a plain attempt's receipt is byte for byte what it was.
    tail: list[Any] = [] if r.subrequests_made is None else [r.subrequests_made, r.subrequests_blocked]
    if r.trace_context is not None:  # appended after those two, only when tracing is on
        tail = [*(tail or [None, None]), r.trace_context]
    if r.deferred_before:  # appended after those three, only after deferrals
        tail = [*(tail + [None, None, None])[:3], r.deferred_before]
    return orjson.dumps(
        [
            COMPACT_V1,
            r.job_id,
            r.attempt,
            r.outcome,
            r.finished_at,
            r.duration_ms,
            r.worker,
            r.http_status,
            r.error_class,
            r.error,
            r.retry_after_s,
            # final_url always has its place (null when not redirected), so a field a later
            # release appends after it is never read as it.
            None
            if res is None
            else [
                res.key,
                res.size,
                res.sha256,
                res.content_type,
                res.http_status,
                res.final_url,
                res.headers,
                # Always in its place, as final_url: a later release's appended field is
                # then never read as it.
                res.fetch_key,
                None
                if res.changed is None and res.revalidated_from is None
                else [res.changed, res.previous_job, res.revalidated_from, res.stored_at],
            ],
            *tail,
        ]
    )


def receipt_decode(raw: str | bytes) -> AttemptFinished:
    """A receipt from either wire format: the compact array or the older JSON object. Raises
    ValueError, TypeError or KeyError on anything else (the writer dead-letters it)."""
    d = orjson.loads(raw)
    if type(d) is dict:  # the object form, written before the compact one
        return AttemptFinished.from_dict(d)
    if type(d) is not list or len(d) < V1_FIELDS or d[0] != COMPACT_V1:
        raise ValueError(f"not a receipt: {str(raw)[:100]!r}")
    # Fields after the first layout's were appended by a newer worker: not ours to know.
    _v, job_id, attempt, outcome, finished_at, duration_ms, worker, status, err_cls, err, wait, res = d[
        :V1_FIELDS
    ]
    if type(job_id) is not str or type(attempt) is not int:
        raise TypeError(f"bad natural key: {job_id!r}, {attempt!r}")
    made, blocked, trace_context, deferred = (d[V1_FIELDS : V1_FIELDS + 4] + [None] * 4)[:4]
    return AttemptFinished(
        job_id,
        attempt,
        outcome,
        finished_at,
        duration_ms,
        worker,
        status,
        err_cls,
        err,
        wait,
        None if res is None else _result_decode(res),
        subrequests_made=made if type(made) is int else None,
        subrequests_blocked=blocked if type(blocked) is int else None,
        trace_context=trace_context if type(trace_context) is str else None,
        deferred_before=deferred if type(deferred) is int else 0,
    )


def _result_decode(res: list[Any]) -> ResultStored:
    """The result's nested array: the first layout's fields and those appended since, the
    re-fetching ones (FR-33, FR-34) as one array in their place."""
    compared = res[RESULT_FIELDS_KNOWN - 1] if len(res) >= RESULT_FIELDS_KNOWN else None
    stored = ResultStored(*res[: RESULT_FIELDS_KNOWN - 1])
    if type(compared) is not list or len(compared) < 4:
        return stored
    changed, previous_job, revalidated_from, stored_at = compared[:4]
    return replace(
        stored,
        changed=changed if type(changed) is bool else None,
        previous_job=previous_job if type(previous_job) is str else None,
        revalidated_from=revalidated_from if type(revalidated_from) is str else None,
        stored_at=float(stored_at) if type(stored_at) in (int, float) else None,
    )
