"""Batches for operators (FR-9, FR-14): each with its parts, its manifest and its loader lease.
Read-only: a batch changes only through intake and the loader."""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html

from apps.admin_mixins import ReadOnlyAdminMixin
from apps.batches.models import Batch, BatchLease, BatchPart


class BatchPartInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = BatchPart
    fields = ("number", "key", "rows", "size", "sha256", "loaded_at")
    readonly_fields = fields
    extra = 0


class BatchLeaseInline(ReadOnlyAdminMixin, admin.StackedInline):
    model = BatchLease
    fields = ("owner", "acquired_at", "expires_at")
    readonly_fields = fields
    extra = 0


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "tenant",
        "status",
        "format",
        "total",
        "rejected",
        "loaded",
        "created_at",
        "finished_at",
    )
    list_filter = ("status", "format", "tenant")
    search_fields = ("=id",)
    ordering = ("-created_at",)
    fields = (
        "id",
        "tenant",
        "status",
        "format",
        "total",
        "rejected",
        "loaded",
        "error",
        "rejected_rows",
        "manifest_key",
        "manifest",
        "idempotency_key",
        "created_at",
        "updated_at",
        "finished_at",
        "callback_url",
        "callback_enqueued_at",
    )
    readonly_fields = fields
    inlines = (BatchLeaseInline, BatchPartInline)

    @admin.display(description="manifest (as stored)")
    def manifest(self, obj: Batch) -> str:
        # Only this page reads a manifest: parts.py brings pyarrow, which every process that
        # autodiscovers the admin (workers, beat) would import for nothing (NFR-42).
        from apps.batches.parts import ManifestMissing, manifest_read  # noqa: PLC0415 - see above

        try:
            found = manifest_read(batch_id=obj.id)
        except ManifestMissing as e:
            return str(e)
        listing = {"parts": [p.__dict__ for p in found.parts], "counts": found.counts}
        return format_html("<pre>{}</pre>", json.dumps(listing, indent=2))
