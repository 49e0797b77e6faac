"""Jobs and attempts in the Django admin (FR-9, contract section 8).

Everything is read-only: a job changes state only through the services of ``apps.jobs``, so an operator's
edit can never skip the rules the API and the workers keep. The two things an operator does,
cancel and requeue, are actions calling ``job_cancel`` and ``jobs_requeue``: the same services the
API calls, offered to staff holding the job's change permission. Nothing is added or deleted here
(attempts are kept forever with their job).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from apps.admin_mixins import ReadOnlyAdminMixin
from apps.jobs.cancel_requeue import job_cancel, jobs_requeue
from apps.jobs.models import Attempt, Job
from apps.jobs.selectors import job_waiting_for

# How far back the domain filter looks for its choices: grouping the whole table on every page
# load would be a full scan; the newest jobs are the ones an operator is looking at.
_DOMAIN_SAMPLE = 10_000
_DOMAIN_CHOICES = 30


class DomainFilter(admin.SimpleListFilter):
    """The busiest domains among recent jobs; any domain works through ``?domain=``."""

    title = "domain"
    parameter_name = "domain"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        recent = Job.objects.order_by("-id").values("id")[:_DOMAIN_SAMPLE]
        rows = (
            Job.objects.filter(id__in=recent)
            .values("domain")
            .annotate(n=Count("id"))
            .order_by("-n", "domain")[:_DOMAIN_CHOICES]
        )
        choices = [(r["domain"], f"{r['domain']} ({r['n']})") for r in rows]
        chosen = self.value()
        if chosen and chosen not in {c[0] for c in choices}:
            choices.insert(0, (chosen, chosen))
        return choices

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(domain=value) if value else queryset


class AttemptInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    ordering = ("number",)
    fields = (
        "number",
        "worker",
        "started_at",
        "finished_at",
        "outcome",
        "http_status",
        "error_class",
        "error",
        "duration_ms",
        "served_from_job",
        "served_from_attempt",
    )
    readonly_fields = fields


@admin.register(Job)
class JobAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "tenant",
        "domain",
        "method",
        "status",
        "priority",
        "attempts_of_max",
        "created_at",
        "finished_at",
    )
    list_filter = ("status", "priority", "tenant", DomainFilter)
    list_select_related = ("tenant",)
    search_fields = ("url",)  # the id is matched exactly in get_search_results
    search_help_text = "A job id (exact) or part of the URL."
    ordering = ("-id",)  # UUIDv7: newest first, on the primary key index
    show_full_result_count = False  # a COUNT(*) over the whole table on every search is not free
    list_per_page = 50
    inlines = (AttemptInline,)
    actions = ("cancel_jobs", "requeue_jobs")
    fieldsets = (
        (
            "Request",
            {"fields": ("id", "tenant", "method", "url", "domain", "headers", "body", "callback_url")},
        ),
        (
            "Options",
            {
                "fields": (
                    "priority",
                    "timeout_s",
                    "max_age_s",
                    "max_attempts",
                    "attempt_budget",
                    "idempotency_key",
                )
            },
        ),
        (
            "State",
            {
                "fields": (
                    "status",
                    "waiting_for",
                    "attempts",
                    "last_error",
                    "created_at",
                    "started_at",
                    "finished_at",
                    "not_before",
                    "cancel_requested_at",
                    "lease_owner",
                    "lease_expires_at",
                    "published_at",
                    "final_published_at",
                )
            },
        ),
        (
            "Result",
            {
                "fields": (
                    "result_key",
                    "result_size",
                    "result_sha256",
                    "result_content_type",
                    "result_http_status",
                    "result_stored_at",
                )
            },
        ),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Job._meta.fields] + ["waiting_for"]

    @admin.display(description="waiting for")
    def waiting_for(self, obj: Job) -> str:
        """The same answer as GET /jobs/{id} (issue 11): why a queued job has not started."""
        wait = job_waiting_for(obj, now=timezone.now())
        if wait.waiting_for is None:
            return "-"
        return f"{wait.waiting_for} until {wait.until.isoformat()}" if wait.until else wait.waiting_for

    @admin.display(description="attempts")
    def attempts_of_max(self, obj: Job) -> str:
        return f"{obj.attempts}/{obj.max_attempts}"

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        term = search_term.strip()
        try:
            job_id = uuid.UUID(term)
        except ValueError:
            # URL substring: a sequential scan, acceptable for an operator's occasional search.
            return super().get_search_results(request, queryset, term)
        return queryset.filter(id=job_id), False

    @admin.action(description="Cancel selected jobs", permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        outcomes = {"cancelled": 0, "cancel_requested": 0, "final": 0}
        for job_id in queryset.values_list("id", flat=True):
            outcomes[job_cancel(job_id=job_id)] += 1
        messages.info(
            request,
            f"{outcomes['cancelled']} cancelled, {outcomes['cancel_requested']} running (their workers "
            f"stop at the next check), {outcomes['final']} already final and left alone.",
        )

    @admin.action(
        description="Requeue selected jobs (failed or cancelled; fresh attempt budget)",
        permissions=["change"],
    )
    def requeue_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        ids = list(queryset.values_list("id", flat=True))
        requeued = jobs_requeue(job_ids=ids)
        messages.info(
            request,
            f"{requeued} requeued; {len(ids) - requeued} were not failed or cancelled and left alone.",
        )


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "job",
        "number",
        "worker",
        "started_at",
        "finished_at",
        "outcome",
        "http_status",
        "error_class",
        "duration_ms",
        "served_from_job",
    )
    list_filter = ("outcome", "error_class")
    list_select_related = ("job",)
    raw_id_fields = ("job",)
    ordering = ("-id",)  # newest first on the primary key, no sort of the whole table
    show_full_result_count = False
    search_fields = ("=job__id",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Attempt._meta.fields]

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Attempt], search_term: str
    ) -> tuple[QuerySet[Attempt], bool]:
        try:
            return queryset.filter(job_id=uuid.UUID(search_term.strip())), False
        except ValueError:
            return queryset.none(), False
