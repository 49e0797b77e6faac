"""How a batch looks in API answers (FR-1 to FR-7, ``/batches``). Built by a plain function; the
serializer classes describe the same shape for the OpenAPI document."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.api.paths import API_V1_BASE
from apps.batches.models import Batch, BatchStatus


def batch_links(*, base: str, batch_id: object) -> dict[str, str]:
    return {
        "self": f"{base}{API_V1_BASE}/batches/{batch_id}",
        "jobs": f"{base}{API_V1_BASE}/jobs?batch={batch_id}",
    }


def batch_representation(batch: Batch, *, base: str, jobs: dict[str, int] | None = None) -> dict[str, Any]:
    accepted = batch.accepted_rows
    body: dict[str, Any] = {
        "id": str(batch.id),
        "status": batch.status,
        "total": batch.total,
        "accepted": accepted,
        "rejected": batch.rejected,
        "loaded": batch.loaded,
        "progress": round(batch.loaded / accepted, 4) if accepted else 1.0,
        "rejected_rows": batch.rejected_rows,
        "error": batch.error or None,
        "created_at": batch.created_at.isoformat().replace("+00:00", "Z"),
        "finished_at": None
        if batch.finished_at is None
        else batch.finished_at.isoformat().replace("+00:00", "Z"),
        "links": batch_links(base=base, batch_id=batch.id),
        "erasure": _erasure(batch),
    }
    if jobs is not None:
        body["jobs"] = jobs
    return body


def _iso(at: Any) -> str | None:
    return None if at is None else at.isoformat().replace("+00:00", "Z")


def _erasure(batch: Batch) -> dict[str, Any] | None:
    """The erasure's progress (FR-53): rows of the batch passed so far, of ``total``."""
    if batch.erase_requested_at is None:
        return None
    done = batch.erase_finished_at is not None
    rows = batch.total if done else min(batch.erase_after_row, batch.total)
    return {
        "requested_at": _iso(batch.erase_requested_at),
        "finished_at": _iso(batch.erase_finished_at),
        "rows_done": rows,
        "progress": 1.0 if done or not batch.total else round(rows / batch.total, 4),
    }


class BatchErasureOutput(serializers.Serializer):
    requested_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(
        allow_null=True, help_text="When every job and the batch's objects were erased."
    )
    rows_done = serializers.IntegerField(help_text="Rows of the file whose job is erased (in row order).")
    progress = serializers.FloatField(help_text="rows_done / total, 0 to 1.")


class RejectedRowOutput(serializers.Serializer):
    row = serializers.IntegerField(
        help_text="The row's number in the file, from 1 (a CSV header is not a row)."
    )
    errors = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Field name → reasons, as POST /jobs would answer for this row.",
    )


class BatchLinksOutput(serializers.Serializer):
    self = serializers.URLField()  # type: ignore[assignment]
    jobs = serializers.URLField(help_text="GET /jobs?batch=<id>: the batch's jobs.")


class BatchOutput(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=BatchStatus.choices)
    total = serializers.IntegerField(help_text="Rows in the submitted file.")
    accepted = serializers.IntegerField(help_text="Rows that passed validation and become jobs.")
    rejected = serializers.IntegerField()
    loaded = serializers.IntegerField(help_text="Accepted rows loaded into jobs so far.")
    progress = serializers.FloatField(help_text="loaded / accepted, 0 to 1.")
    rejected_rows = RejectedRowOutput(many=True, help_text="The first rejected rows with their reasons.")
    error = serializers.CharField(allow_null=True, help_text="Why a failed batch failed.")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    links = BatchLinksOutput()
    erasure = BatchErasureOutput(
        allow_null=True, help_text="DELETE /batches/{id}'s progress; null unless it was asked (FR-53)."
    )
    jobs = serializers.DictField(
        child=serializers.IntegerField(),
        required=False,
        help_text="GET only: the batch's jobs by status.",
    )


class BatchCancelOutput(serializers.Serializer):
    id = serializers.UUIDField()
    cancelled = serializers.IntegerField(help_text="Queued jobs cancelled now (final).")
    cancel_requested = serializers.IntegerField(
        help_text="Running jobs asked to stop: each ends cancelled at its worker's next check."
    )
