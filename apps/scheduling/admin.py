"""Dead letters in the Django admin (FR-8).

A list of failed jobs with their attempt history, a grouped page ("by domain and last error") so
that a hundred jobs to one domain answering 401 show up as one row with a count, and two actions,
requeue and discard, for one job, a selection, or a whole group, for staff holding the change
permission. Everything goes through ``apps.scheduling.services``; nothing is edited by hand.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from apps.admin_mixins import ReadOnlyAdminMixin, ScaledListMixin, last_error_readable
from apps.jobs.admin import AttemptInline, known_error_class_choices
from apps.scheduling.models import DeadLetter
from apps.scheduling.selectors import (
    GROUP_WINDOW,
    NO_CLASS,
    dead_letters_annotated,
    dead_letters_grouped,
    dead_letters_in_group,
    dead_letters_window_start,
)
from apps.scheduling.services import dead_letters_discard, dead_letters_requeue


class DeadLetterAttemptInline(AttemptInline):
    """The job admin's read-only attempt history, on the dead-letter proxy model."""

    fk_name = "job"


class ErrorClassFilter(admin.SimpleListFilter):
    title = "last error class"
    parameter_name = "error_class"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # The known classes, not the ones in use: finding those groups every dead letter.
        chosen = self.value()
        return [(NO_CLASS, NO_CLASS), *known_error_class_choices(None if chosen == NO_CLASS else chosen)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if value == NO_CLASS:
            return queryset.filter(Q(error_class__isnull=True))
        return queryset.filter(Q(error_class=value))


_COMMON_HTTP_STATUSES = ("400", "401", "403", "404", "410", "429", "500", "502", "503", "504")


class HttpStatusFilter(admin.SimpleListFilter):
    title = "last HTTP status"
    parameter_name = "http_status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # The statuses that end jobs most often, without a scan; any other works via ?http_status=.
        statuses = list(_COMMON_HTTP_STATUSES)
        chosen = self.value()
        if chosen and chosen not in statuses:
            statuses.insert(0, chosen)
        return [(s, s) for s in statuses]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(Q(error_http_status=value)) if value else queryset


@admin.register(DeadLetter)
class DeadLetterAdmin(ScaledListMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "tenant",
        "domain",
        "error_class_shown",
        "error_http_status_shown",
        "attempts",
        "finished_at",
        "url",
    )
    list_filter = (ErrorClassFilter, HttpStatusFilter, "tenant")
    search_fields = ("=id", "domain", "url")
    list_select_related = ("tenant",)
    ordering = ("-finished_at",)
    date_hierarchy = None
    inlines = (DeadLetterAttemptInline,)
    actions = ("requeue", "discard")
    change_list_template = "admin/scheduling/deadletter/change_list.html"
    fields = readonly_fields = (
        "id",
        "tenant",
        "method",
        "url",
        "domain",
        "priority",
        "status",
        "attempts",
        "max_attempts",
        "last_error_shown",
        "created_at",
        "started_at",
        "finished_at",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return dead_letters_annotated().select_related("tenant")

    @admin.display(description="last error")
    def last_error_shown(self, obj: Any) -> str:
        return last_error_readable(obj.last_error) or "-"

    @admin.display(description="last error class", ordering="error_class")
    def error_class_shown(self, obj: Any) -> str:
        return obj.error_class or NO_CLASS

    @admin.display(description="HTTP status", ordering="error_http_status")
    def error_http_status_shown(self, obj: Any) -> str:
        return obj.error_http_status or ""

    @admin.action(description="Requeue (fresh attempt budget, history kept)", permissions=["change"])
    def requeue(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        n = dead_letters_requeue(job_ids=queryset.values_list("id", flat=True))
        self.message_user(request, f"Requeued {n} job(s).", messages.SUCCESS)

    @admin.action(description="Discard (the jobs stay failed; they leave this list)", permissions=["change"])
    def discard(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        n = dead_letters_discard(job_ids=queryset.values_list("id", flat=True), discarded_by=_who(request))
        self.message_user(request, f"Discarded {n} dead letter(s).", messages.SUCCESS)

    # --- the grouped page ------------------------------------------------------------------

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The grouped page is the default view: it answers "what is wrong" in a few rows. Any
        query string (a filter, a search, even an empty ``?q=``) opens the one-by-one list, and
        actions post to it as usual."""
        if request.method == "GET" and not request.GET:
            return self.grouped_view(request)
        return super().changelist_view(request, extra_context)

    def get_urls(self) -> list[URLPattern]:
        grouped = path(
            "grouped/",
            self.admin_site.admin_view(self.grouped_view),
            name="scheduling_deadletter_grouped",
        )
        return [grouped, *super().get_urls()]

    def grouped_view(self, request: HttpRequest) -> HttpResponse:
        """GET: one row per (domain, last error class, HTTP status) with a count. POST: requeue
        or discard every job of one group (the change permission, like the actions)."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            if not self.has_change_permission(request):
                return HttpResponse(status=403)
            group = dead_letters_in_group(
                domain=request.POST.get("domain", ""),
                error_class=request.POST.get("error_class", ""),
                http_status=request.POST.get("http_status", ""),
            )
            ids = list(group.values_list("id", flat=True))
            if request.POST.get("action") == "requeue":
                n = dead_letters_requeue(job_ids=ids)
                self.message_user(request, f"Requeued {n} job(s).", messages.SUCCESS)
            elif request.POST.get("action") == "discard":
                n = dead_letters_discard(job_ids=ids, discarded_by=_who(request))
                self.message_user(request, f"Discarded {n} dead letter(s).", messages.SUCCESS)
            else:
                self.message_user(request, "Unknown action.", messages.ERROR)
            return HttpResponseRedirect(reverse("admin:scheduling_deadletter_grouped"))
        changelist = reverse("admin:scheduling_deadletter_changelist")
        since = dead_letters_window_start(window=GROUP_WINDOW)
        groups = dead_letters_grouped(since=since)
        for g in groups:
            query = {"domain": g["domain"], "error_class": g["error_class"]}
            if g["error_http_status"]:
                query["http_status"] = g["error_http_status"]
            g["link"] = format_html('<a href="{}?{}">{}</a>', changelist, urlencode(query), g["count"])
        context = {
            **self.admin_site.each_context(request),
            "title": "Dead letters by domain and last error",
            "opts": self.model._meta,
            "groups": groups,
            "since": since,
            "window": GROUP_WINDOW,
            "changelist_url": changelist,
            "can_change": self.has_change_permission(request),
        }
        return TemplateResponse(request, "admin/scheduling/deadletter/grouped.html", context)

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # ?domain=... from the grouped page's links.
        return lookup == "domain" or super().lookup_allowed(lookup, value, request)


def _who(request: HttpRequest) -> str:
    user = getattr(request, "user", None)
    return str(getattr(user, "username", "") or "")
