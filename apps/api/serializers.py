"""How jobs, their attempts and errors look in API answers, for every API app.

The representation is built by plain functions (a list page holds up to 500 jobs and DRF's
field machinery would cost more than the query); the serializer classes describe the same shape
for the OpenAPI document, and tests/api checks that the two agree.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone
from rest_framework import serializers
from rest_framework.request import Request

from apps.api.paths import API_V1_BASE
from apps.jobs.models import Attempt, AttemptOutcome, Job, JobStatus, Method, Priority, Render, WaitingFor
from apps.jobs.selectors import job_waiting_for


def base_url(request: Request | HttpRequest) -> str:
    return settings.PUBLIC_BASE_URL or f"{request.scheme}://{request.get_host()}"


def job_links(*, base: str, job_id: uuid.UUID | str) -> dict[str, str]:
    own = f"{base}{API_V1_BASE}/jobs/{job_id}"
    return {"self": own, "result": f"{own}/result", "attempts": f"{own}/attempts", "cancel": f"{own}/cancel"}


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def job_representation(job: Job, *, base: str) -> dict[str, Any]:
    last = job.last_error
    wait = job_waiting_for(job, now=timezone.now())
    return {
        "id": str(job.id),
        "url": job.url,
        "method": job.method,
        "status": job.status,
        "priority": job.priority,
        "render": job.render,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "last_error": None
        if not last
        else {
            "class": last.get("class"),
            "message": last.get("message"),
            "http_status": last.get("http_status"),
        },
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "result_expired": job.result_deleted_at is not None,
        "waiting_for": wait.waiting_for,
        "waiting_until": _iso(wait.until),
        "final_url": job.result_final_url or (job.url if job.status == JobStatus.SUCCEEDED else None),
        "batch": None if job.batch_id is None else str(job.batch_id),
        "batch_row": job.batch_row,
        "links": job_links(base=base, job_id=job.id),
    }


def attempt_representation(a: Attempt, *, own_jobs: Collection[uuid.UUID] = ()) -> dict[str, Any]:
    """``own_jobs``: which of the jobs its ``served_from`` may name are the caller's. Another
    tenant's job (two tenants an operator let share fetches) is not named: it would tell one
    tenant the id, and so the timing, of another's job."""
    return {
        "number": a.number,
        "started_at": _iso(a.started_at),
        "finished_at": _iso(a.finished_at),
        "outcome": a.outcome,
        "http_status": a.http_status,
        "error_class": a.error_class,
        "error": a.error,
        "duration_ms": a.duration_ms,
        "subrequests": None
        if a.subrequests_made is None
        else {"made": a.subrequests_made, "blocked": a.subrequests_blocked or 0},
        "served_from": _served_from(a, own_jobs),
    }


def _served_from(a: Attempt, own_jobs: Collection[uuid.UUID]) -> dict[str, Any] | None:
    if a.served_from_job is None:
        return None
    if a.served_from_job not in own_jobs:
        return {"job_id": None, "attempt": None, "other_tenant": True}
    return {"job_id": str(a.served_from_job), "attempt": a.served_from_attempt, "other_tenant": False}


# --- Shapes for the OpenAPI document -----------------------------------------------------


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


class JobOutput(serializers.Serializer):
    id = serializers.UUIDField()
    url = serializers.CharField()
    method = serializers.ChoiceField(choices=Method.choices)
    status = serializers.ChoiceField(choices=JobStatus.choices)
    priority = serializers.ChoiceField(choices=Priority.choices)
    render = serializers.ChoiceField(
        choices=Render.choices, help_text='"browser": rendered in headless Chromium; "none": a plain fetch.'
    )
    attempts = serializers.IntegerField(help_text="Attempts started so far.")
    max_attempts = serializers.IntegerField()
    last_error = LastErrorOutput(allow_null=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    result_expired = serializers.BooleanField(
        help_text="Retention deleted the stored result: /result answers 410 (SCRAPEJOBS_RESULT_RETENTION_DAYS)."
    )
    waiting_for = serializers.ChoiceField(
        choices=WaitingFor.choices,
        allow_null=True,
        help_text="What a queued job waits for (null otherwise): domain_rate, domain_concurrency or "
        "domain_paused (its target domain's limits or its request to back off), domain_turn (its "
        "place in the domain's line: higher-priority jobs, or other tenants' shares, go first), "
        "retry_backoff (the "
        "wait before its next attempt), tenant_share (its turn among your and other tenants' due "
        "jobs), dispatch (sent, waiting for a free worker).",
    )
    waiting_until = serializers.DateTimeField(
        allow_null=True,
        help_text="When a queued job may start at the earliest; null when not known (tenant_share, "
        "dispatch) or not queued.",
    )
    final_url = serializers.CharField(
        allow_null=True,
        help_text="The URL that gave the stored result, after redirects (url itself when none); "
        "null unless succeeded.",
    )
    batch = serializers.UUIDField(
        allow_null=True, help_text="The batch this job came from; null for POST /jobs."
    )
    batch_row = serializers.IntegerField(
        allow_null=True, help_text="Its row in that batch, numbered from 1 as in the batch's rejected_rows."
    )
    links = JobLinksOutput()


class ServedFromOutput(serializers.Serializer):
    job_id = serializers.UUIDField(allow_null=True, help_text="Null when the job is another tenant's.")
    attempt = serializers.IntegerField(allow_null=True, help_text="Null when the job is another tenant's.")
    other_tenant = serializers.BooleanField(
        help_text="The fetch was another tenant's (an operator let both share fetches); its job is not named."
    )


class SubrequestsOutput(serializers.Serializer):
    made = serializers.IntegerField(help_text="Requests the page made besides its document.")
    blocked = serializers.IntegerField(
        help_text="Of those, how many were not let through: a refused address, the domain's rate, a "
        "blocked resource type, a websocket."
    )


class AttemptOutput(serializers.Serializer):
    number = serializers.IntegerField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    outcome = serializers.ChoiceField(choices=AttemptOutcome.choices, allow_null=True)
    http_status = serializers.IntegerField(allow_null=True)
    error_class = serializers.CharField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)
    subrequests = SubrequestsOutput(
        allow_null=True,
        help_text='A rendered attempt\'s subresource requests (render "browser"); null otherwise.',
    )
    served_from = ServedFromOutput(
        allow_null=True,
        help_text="Set when this attempt did not fetch: an identical request's attempt (single-flight "
        "fetch within max_age_s) whose stored outcome it was served.",
    )


# The body of every error answer (apps.api.errors builds it). No docstring: it would show in
# the schema.
class ErrorOutput(serializers.Serializer):
    type = serializers.CharField()
    code = serializers.CharField()
    detail = serializers.CharField()
    fields = serializers.DictField(  # type: ignore[assignment]  # a field, popped by the metaclass
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="Validation errors only: field name → messages.",
    )
