"""Operators' page for the writer: its status and its dead receipts, with replay and drop (one,
selected, or all). Thin: reads through selectors, acts through ``apps.writer.dead_receipts``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse

from apps.admin_mixins import ReadOnlyAdminMixin
from apps.writer.dead_receipts import dead_receipts_drop, dead_receipts_replay
from apps.writer.models import WriterDeadLetter
from apps.writer.selectors import dead_receipts_list, writer_status

PAGE = 200


@admin.register(WriterDeadLetter)
class WriterDeadLetterAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            if not self.has_change_permission(request):
                raise PermissionDenied
            return self._act(request)
        status = writer_status()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Writer: status and dead receipts",
            "status_lines": status.lines(),
            "last_batches": status.last_batches,
            "dead_receipts": dead_receipts_list(limit=PAGE),
            "dead_receipt_count": status.dead_receipts,
            "page_size": PAGE,
            "can_change": self.has_change_permission(request),
        }
        return TemplateResponse(request, "writer/admin_dead_receipts.html", context)

    def _act(self, request: HttpRequest) -> HttpResponse:
        action = request.POST.get("action", "")
        everything = request.POST.get("scope") == "all"
        ids = None if everything else request.POST.getlist("ids")
        if ids == []:
            messages.warning(request, "Select dead receipts first (or choose 'all').")
        elif action == "replay":
            n = dead_receipts_replay(ids=ids)
            messages.success(request, f"Replayed {n} receipt(s) into the writer's stream.")
        elif action == "drop":
            n = dead_receipts_drop(ids=ids)
            messages.success(request, f"Dropped {n} dead receipt(s).")
        else:
            messages.error(request, f"Unknown action {action!r}.")
        return HttpResponseRedirect(request.path)
