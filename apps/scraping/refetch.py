"""Re-fetching, the worker's side (FR-33, FR-34, docs/revalidation.md): the previous success a job
that asked is compared with, the conditional request made from its validators, and the result of
a ``304`` (the previous body kept) or of a fetched body (compared by SHA-256). A plain job asked
for neither and goes through here untouched, reading nothing."""

from __future__ import annotations

import dataclasses

from apps.jobs.claims import ClaimedJob
from apps.jobs.receipts import ResultStored
from apps.jobs.revalidation import PreviousSuccess, job_previous_success
from apps.results.storage import results_storage
from apps.scraping.fetch import FetchRequest


def _asks_previous(claimed: ClaimedJob) -> bool:
    """Whether the job asked to be compared with the tenant's previous success (FR-33, FR-34)."""
    return claimed.revalidate or claimed.callback_on is not None


def previous_success_for(claimed: ClaimedJob, *, fetch_key: str | None) -> PreviousSuccess | None:
    """The tenant's previous success of the job's fetch key, for a job that asked (one read);
    None for every other job, which reads nothing. Raises on a database error (the attempt then
    ends as a temporary failure, ``internal_error``)."""
    if not _asks_previous(claimed) or fetch_key is None or claimed.tenant_id is None:
        return None
    return job_previous_success(fetch_key=fetch_key, tenant_id=claimed.tenant_id, job_id=claimed.id)


def conditional(claimed: ClaimedJob, request: FetchRequest, previous: PreviousSuccess | None) -> FetchRequest:
    """The request with the previous success's validators (FR-33, docs/revalidation.md), when
    the job asked to revalidate, that success had some, and its body is still in storage (gone,
    erased or removed by retention: the fetch is unconditional). The caller's own headers win:
    a job that set If-None-Match itself sends it as given."""
    if not claimed.revalidate or previous is None:
        return request
    validators = {
        name: value
        for name, value in previous.validators().items()
        if not any(k.lower() == name.lower() for k in request.headers)
    }
    own = any(k.lower() in ("if-none-match", "if-modified-since") for k in request.headers)
    if not (validators or own) or previous.body_deleted or not results_storage().exists(previous.result_key):
        return request
    return dataclasses.replace(request, headers={**request.headers, **validators}, conditional=True)


def kept(previous: PreviousSuccess, *, fetch_key: str | None) -> ResultStored:
    """A 304's result: the previous success's stored body (same key, size and SHA-256), aged by
    when that body was fetched."""
    return ResultStored(
        key=previous.result_key,
        size=previous.size,
        sha256=previous.sha256,
        content_type=previous.content_type,
        http_status=previous.http_status,
        final_url=previous.final_url,
        headers=previous.headers,
        fetch_key=fetch_key,
        changed=False,
        previous_job=previous.job_id,
        revalidated_from=previous.job_id,
        stored_at=previous.stored_at.timestamp(),
    )


def compared(claimed: ClaimedJob, stored: ResultStored, previous: PreviousSuccess | None) -> ResultStored:
    """A fetched body compared with the previous success, for a job that asked (FR-34): changed
    when its SHA-256 differs, or when there was none (a first fetch counts as a change)."""
    if not _asks_previous(claimed):
        return stored
    if previous is None:
        return dataclasses.replace(stored, changed=True)
    return dataclasses.replace(stored, changed=stored.sha256 != previous.sha256, previous_job=previous.job_id)
