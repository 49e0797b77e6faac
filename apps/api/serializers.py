"""How jobs, their attempts and errors look in API answers, for every API app.

The representation is built by plain functions (a list page holds up to 500 jobs and DRF's
field machinery would cost more than the query); the serializer classes describe the same shape
for the OpenAPI document, and tests/api checks that the two agree. A job's fields are declared
once, in apps/api/job_view.py: its answer and ``JobOutput`` both follow from that declaration.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from rest_framework import serializers
from rest_framework.request import Request

from apps.api.job_view import JOB_VIEW, iso, job_view_answer, job_view_serializer
from apps.jobs.models import Attempt, AttemptOutcome, Job


def base_url(request: Request | HttpRequest) -> str:
    return settings.PUBLIC_BASE_URL or f"{request.scheme}://{request.get_host()}"


def job_representation(job: Job, *, base: str) -> dict[str, Any]:
    """A job in API answers: the fields of its public view (apps/api/job_view.py)."""
    return job_view_answer(JOB_VIEW, job, base=base)


def attempt_representation(a: Attempt, *, own_jobs: Collection[uuid.UUID] = ()) -> dict[str, Any]:
    """``own_jobs``: which of the jobs its ``served_from`` may name are the caller's. Another
    tenant's job (two tenants an operator let share fetches) is not named: it would tell one
    tenant the id, and so the timing, of another's job."""
    return {
        "number": a.number,
        "started_at": iso(a.started_at),
        "finished_at": iso(a.finished_at),
        "outcome": a.outcome,
        "http_status": a.http_status,
        "error_class": a.error_class,
        "error": a.error,
        "duration_ms": a.duration_ms,
        "subrequests": None
        if a.subrequests_made is None
        else {"made": a.subrequests_made, "blocked": a.subrequests_blocked or 0},
        "served_from": _served_from(a, own_jobs),
        "revalidated_from": None if a.revalidated_from is None else str(a.revalidated_from),
    }


def _served_from(a: Attempt, own_jobs: Collection[uuid.UUID]) -> dict[str, Any] | None:
    if a.served_from_job is None:
        return None
    if a.served_from_job not in own_jobs:
        return {"job_id": None, "attempt": None, "other_tenant": True}
    return {"job_id": str(a.served_from_job), "attempt": a.served_from_attempt, "other_tenant": False}


# --- Shapes for the OpenAPI document -----------------------------------------------------


# The job's fields, their shapes and order: JOB_VIEW.
JobOutput = job_view_serializer(JOB_VIEW, name="JobOutput", module=__name__)


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
    revalidated_from = serializers.UUIDField(
        allow_null=True,
        help_text="Set when the target answered 304 Not Modified to this attempt's conditional request "
        "(revalidate): the job whose stored body the job kept.",
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
