"""Reads for the query endpoints. Every read is scoped by tenant: another tenant's job does not
exist (apps.api.selectors holds the reads intake makes too). GET /jobs/{id} reads through the
cache of apps/query/cache.py; ?wait= is apps/query/waiting.py.
"""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from apps.api.ids import parse_job_id
from apps.api.job_view import JOB_VIEW, job_view_columns
from apps.jobs.models import Attempt, Job

# The columns a job's API representation needs, from its declaration (apps/api/job_view.py): the
# reads load these, the read cache keeps them (apps/query/cache.py). The request headers and body
# stay in the row; "version" is the read cache's compare-and-set.
JOB_COLUMNS = job_view_columns(JOB_VIEW) + ("version",)
# Result columns, for GET /jobs/{id}/result.
RESULT_COLUMNS = (
    "result_key",
    "result_size",
    "result_sha256",
    "result_content_type",
    "result_http_status",
    "result_stored_at",
    "browser_options",  # the screenshot's link (FR-31)
    "result_headers",  # headers (FR-25)
)


def job_get(*, tenant_id: uuid.UUID, job_id: uuid.UUID | str, with_result: bool = False) -> Job | None:
    """The tenant's job, or None (missing, malformed id, or another tenant's: all alike)."""
    parsed = parse_job_id(job_id)
    if parsed is None:
        return None
    columns = JOB_COLUMNS + RESULT_COLUMNS if with_result else JOB_COLUMNS
    return Job.objects.only(*columns).filter(id=parsed, tenant_id=tenant_id).first()


# --- List ---------------------------------------------------------------------------------


def job_list(
    *,
    tenant_id: uuid.UUID,
    status: str | None = None,
    priority: str | None = None,
    batch_id: uuid.UUID | None = None,
    changed: bool | None = None,
    before: uuid.UUID | None = None,
    limit: int = 50,
) -> tuple[list[Job], uuid.UUID | None]:
    """One page of the tenant's jobs, newest first, and the id to continue below (or None).

    Ids are UUIDv7 (unique, time-ordered by the clock of the host that minted them), so
    ``id < last`` continues exactly where the page ended: a job never shows twice, and every job
    committed before the walk's first page is in it, whatever the hosts' clocks (each page reads
    every committed job below the cursor). A job committed during the walk shows (once) only if
    its id is below the cursor then: one minted by a host whose clock is behind, or a batch's row
    loaded during the walk (its id was minted at intake); one above it does not. FR-3,
    tests/query/test_list_clocks.py. Served by the jobs_tenant_*_newest indexes; ``changed``
    (FR-34) by jobs_tenant_changed_newest, which holds only the jobs that have one.
    """
    qs = Job.objects.only(*JOB_COLUMNS).filter(tenant_id=tenant_id)
    if status is not None:
        qs = qs.filter(status=status)
    if priority is not None:
        qs = qs.filter(priority=priority)
    if batch_id is not None:
        qs = qs.filter(batch_id=batch_id)
    if changed is not None:
        qs = qs.filter(changed=changed)
    if before is not None:
        qs = qs.filter(id__lt=before)
    rows = list(qs.order_by("-id")[: limit + 1])
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1].id
    return rows, None


def attempt_list(*, job_id: uuid.UUID) -> QuerySet[Attempt]:
    return Attempt.objects.filter(job_id=job_id).order_by("number")


def jobs_of_tenant(*, tenant_id: uuid.UUID, job_ids: set[uuid.UUID]) -> set[uuid.UUID]:
    """Which of ``job_ids`` are the tenant's (no query for none)."""
    if not job_ids:
        return set()
    return set(Job.objects.filter(tenant_id=tenant_id, id__in=job_ids).values_list("id", flat=True))
