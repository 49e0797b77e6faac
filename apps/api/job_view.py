"""A job's public view, declared once: ``JOB_VIEW``, the fields of a job in API answers (GET
/jobs, /jobs/{id}, ``?wait=``), each with the row's columns it reads, its value in the JSON
answer and its shape in the OpenAPI document.

Everything else about the view follows from it:

- the columns the reads load (``job_view_columns``: ``JOB_COLUMNS`` in apps/query/selectors.py),
  and so the row the read cache keeps (apps/query/cache.py) and the fast read answers from
  (apps/query/fast_read.py);
- the JSON answer (``job_view_answer``, ``job_representation`` in apps/api/serializers.py), its
  keys in the declaration's order;
- the serializer describing it in the OpenAPI document (``job_view_serializer``, ``JobOutput``),
  and so the client's generated models (clients/python/tools/generate_models.py).

A new read-only field is one entry here (docs/development.md, "Adding a field to a job"). The
analytics export keeps its own column set (apps/jobs/export_reads.py). This module imports no
serializers module, so the selectors may import it (tests/test_architecture.py).
"""

from __future__ import annotations

import types
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from django.utils import timezone
from rest_framework import serializers

from apps.api.paths import API_V1_BASE
from apps.jobs.models import Job, JobStatus, Method, Priority, Render, WaitingFor
from apps.jobs.selectors import JOB_WAITING_COLUMNS, JobWait, job_waiting_for


class JobViewContext(NamedTuple):
    """What a field's value may read besides the row: the answer's base URL, and what the job
    waits for (worked out once per job, at one ``now``, for ``waiting_for`` and ``waiting_until``)."""

    base: str
    wait: JobWait


@dataclass(frozen=True, slots=True)
class JobField:
    """One field of a job's public view: a column of the row (``value`` None: the column
    ``columns[0]``, through ``to_json`` when given) or a value worked out from ``columns``."""

    name: str  # its key in the JSON answer and its property in the OpenAPI document
    columns: tuple[str, ...]  # the row's columns it reads (Job attnames)
    shape: Callable[[], serializers.Field]  # a fresh DRF field: its shape in the OpenAPI document
    value: Callable[[Job, JobViewContext], Any] | None = None  # its JSON value, from the row
    to_json: Callable[[Any], Any] | None = None  # a column's value to its JSON value

    def __post_init__(self) -> None:
        if self.value is None and len(self.columns) != 1:
            raise ValueError(f"{self.name}: a field without a value function shows exactly one column")


def column(
    name: str,
    shape: Callable[[], serializers.Field],
    *,
    source: str | None = None,
    to_json: Callable[[Any], Any] | None = None,
) -> JobField:
    """A field that shows one column (``source``, by default its name): as it is, or through
    ``to_json``."""
    return JobField(name, (source or name,), shape, to_json=to_json)


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def _text_or_none(value: uuid.UUID | None) -> str | None:
    return None if value is None else str(value)


def job_links(*, base: str, job_id: uuid.UUID | str) -> dict[str, str]:
    own = f"{base}{API_V1_BASE}/jobs/{job_id}"
    return {"self": own, "result": f"{own}/result", "attempts": f"{own}/attempts", "cancel": f"{own}/cancel"}


def _last_error(last: dict[str, Any] | None) -> dict[str, Any] | None:
    if not last:
        return None
    return {
        "class": last.get("class"),
        "message": last.get("message"),
        "http_status": last.get("http_status"),
    }


def _final_url(job: Job, _view: JobViewContext) -> str | None:
    return job.result_final_url or (job.url if job.status == JobStatus.SUCCEEDED else None)


# --- The nested shapes --------------------------------------------------------------------


class JobLinksOutput(serializers.Serializer):
    self = serializers.URLField()  # type: ignore[assignment]
    result = serializers.URLField()
    attempts = serializers.URLField()
    cancel = serializers.URLField()


class LastErrorOutput(serializers.Serializer):
    message = serializers.CharField(allow_null=True)
    http_status = serializers.IntegerField(allow_null=True)


# "class" is a Python keyword: declare it after the class body.
LastErrorOutput._declared_fields["class"] = serializers.CharField(
    allow_null=True, help_text="Error class, e.g. timeout, http_404, refused_address."
)


# --- The declaration ----------------------------------------------------------------------

# In the order of the JSON answer and of the OpenAPI document's properties.
JOB_VIEW: tuple[JobField, ...] = (
    column("id", serializers.UUIDField, to_json=str),
    column("url", serializers.CharField),
    column("method", lambda: serializers.ChoiceField(choices=Method.choices)),
    column("status", lambda: serializers.ChoiceField(choices=JobStatus.choices)),
    column("priority", lambda: serializers.ChoiceField(choices=Priority.choices)),
    column(
        "render",  # FR-30
        lambda: serializers.ChoiceField(
            choices=Render.choices,
            help_text='"browser": rendered in headless Chromium; "none": a plain fetch.',
        ),
    ),
    column("attempts", lambda: serializers.IntegerField(help_text="Attempts started so far.")),
    column("max_attempts", serializers.IntegerField),
    column("last_error", lambda: LastErrorOutput(allow_null=True), to_json=_last_error),
    column("created_at", serializers.DateTimeField, to_json=iso),
    column("started_at", lambda: serializers.DateTimeField(allow_null=True), to_json=iso),
    column("finished_at", lambda: serializers.DateTimeField(allow_null=True), to_json=iso),
    column(
        "result_expired",  # retention
        lambda: serializers.BooleanField(
            help_text="Retention deleted the stored result: /result answers 410 (SCRAPEJOBS_RESULT_RETENTION_DAYS)."
        ),
        source="result_deleted_at",
        to_json=lambda deleted_at: deleted_at is not None,
    ),
    JobField(
        "waiting_for",
        JOB_WAITING_COLUMNS,
        lambda: serializers.ChoiceField(
            choices=WaitingFor.choices,
            allow_null=True,
            help_text="What a queued job waits for (null otherwise): domain_rate, domain_concurrency or "
            "domain_paused (its target domain's limits or its request to back off), domain_turn (its "
            "place in the domain's line: higher-priority jobs, or other tenants' shares, go first), "
            "retry_backoff (the "
            "wait before its next attempt), tenant_share (its turn among your and other tenants' due "
            "jobs), dispatch (sent, waiting for a free worker).",
        ),
        value=lambda _job, view: view.wait.waiting_for,
    ),
    JobField(
        "waiting_until",
        JOB_WAITING_COLUMNS,
        lambda: serializers.DateTimeField(
            allow_null=True,
            help_text="When a queued job may start at the earliest; null when not known (tenant_share, "
            "dispatch) or not queued.",
        ),
        value=lambda _job, view: iso(view.wait.until),
    ),
    JobField(
        "final_url",  # FR-25
        ("result_final_url", "url", "status"),
        lambda: serializers.CharField(
            allow_null=True,
            help_text="The URL that gave the stored result, after redirects (url itself when none); "
            "null unless succeeded.",
        ),
        value=_final_url,
    ),
    column(
        "batch",  # FR-10, FR-24: a batch's rows map to their jobs
        lambda: serializers.UUIDField(
            allow_null=True, help_text="The batch this job came from; null for POST /jobs."
        ),
        source="batch_id",
        to_json=_text_or_none,
    ),
    column(
        "batch_row",
        lambda: serializers.IntegerField(
            allow_null=True,
            help_text="Its row in that batch, numbered from 1 as in the batch's rejected_rows.",
        ),
    ),
    column(
        "changed",  # FR-34
        lambda: serializers.BooleanField(
            allow_null=True,
            help_text="For a succeeded job that asked (revalidate or callback_on): whether its body's SHA-256 "
            "differs from your previous success of the same request (true for the first one; false after a "
            "304). Null for every other job.",
        ),
    ),
    column(
        "previous_job",  # FR-34
        lambda: serializers.UUIDField(
            allow_null=True, help_text="That previous success, the body was compared with; null when none."
        ),
        to_json=_text_or_none,
    ),
    JobField(
        "links", ("id",), JobLinksOutput, value=lambda job, view: job_links(base=view.base, job_id=job.id)
    ),
)


# --- What follows from a declaration -------------------------------------------------------


def job_view_columns(view: Iterable[JobField]) -> tuple[str, ...]:
    """Every column the view's fields read, each once, in the order they are first named."""
    return tuple(dict.fromkeys(name for field in view for name in field.columns))


def job_view_answer(view: Iterable[JobField], job: Job, *, base: str) -> dict[str, Any]:
    """The job's JSON answer: each field's value, in the view's order. A plain loop: a page of
    500 jobs pays it 500 times, and a call per column field would cost half as much again."""
    context = JobViewContext(base, job_waiting_for(job, now=timezone.now()))
    answer: dict[str, Any] = {}
    for field in view:
        if field.value is not None:
            answer[field.name] = field.value(job, context)
        elif field.to_json is None:
            answer[field.name] = getattr(job, field.columns[0])
        else:
            answer[field.name] = field.to_json(getattr(job, field.columns[0]))
    return answer


def job_view_serializer(
    view: Iterable[JobField], *, name: str, module: str = __name__
) -> type[serializers.Serializer]:
    """A serializer class (named ``name``, the OpenAPI component's name; defined in ``module``)
    with the view's fields, in its order (DRF orders declared fields by their creation, here the
    view's). No docstring: it would show in the schema."""
    body: dict[str, Any] = {"__module__": module}
    body.update((field.name, field.shape()) for field in view)
    return types.new_class(name, (serializers.Serializer,), exec_body=lambda ns: ns.update(body))
