"""Jobs and attempts in the Django admin (FR-9, FR-14).

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
from django.utils.html import format_html

from apps.admin_mixins import (
    ReadOnlyAdminMixin,
    ScaledListMixin,
    body_masked,
    error_readable,
    headers_masked,
    last_error_readable,
)
from apps.jobs.cancel_requeue import job_cancel, jobs_requeue
from apps.jobs.models import Attempt, Job, counted_attempts
from apps.jobs.selectors import job_waiting_for
from apps.jobs.sweeping import LEASE_EXPIRED, WORKER_STOPPED

# The failure classes an attempt can end with (NFR-3, apps/scraping/errors.py and the
# sweeper), offered by the error-class filters without reading the ledger: grouping three million
# attempts to list the classes in use was a scan on every page load. A class not listed here
# (another http_<status>) still works through ``?error_class=``.
KNOWN_ERROR_CLASSES = (
    "timeout",
    "connection_error",
    "dns_error",
    "tls_error",
    "address_refused",
    "body_too_large",
    "too_many_redirects",
    "invalid_response",
    "invalid_url",
    "interrupted",
    "http_400",
    "http_401",
    "http_403",
    "http_404",
    "http_408",
    "http_410",
    "http_429",
    "http_500",
    "http_502",
    "http_503",
    "http_504",
    LEASE_EXPIRED,
    WORKER_STOPPED,
    "lease_lost",
    "cancelled",
    "storage_error",
    "internal_error",
)


def known_error_class_choices(chosen: str | None) -> list[tuple[str, str]]:
    """The filter's choices: the known classes, and the one in the URL if it is another."""
    classes = list(KNOWN_ERROR_CLASSES)
    if chosen and chosen not in classes:
        classes.insert(0, chosen)
    return [(c, c) for c in classes]


# How far back the domain filter looks for its choices: grouping the whole table on every page
# load would be a full scan; the newest jobs are the ones an operator is looking at.
_DOMAIN_SAMPLE = 10_000
_DOMAIN_CHOICES = 30


class DomainFilter(admin.SimpleListFilter):
    """The busiest domains among recent jobs; any domain works through ``?domain=``."""

    title = "domain"
    parameter_name = "domain"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # Where the sample starts, then a range of the primary key: "id IN (newest 10,000)" made
        # the planner hash-join the whole table (2 s at a million jobs, bench/admin.py).
        oldest = Job.objects.order_by("-id").values_list("id", flat=True)[_DOMAIN_SAMPLE - 1 : _DOMAIN_SAMPLE]
        recent = Job.objects.filter(id__gte=oldest[0]) if oldest else Job.objects.all()
        rows = recent.values("domain").annotate(n=Count("id")).order_by("-n", "domain")[:_DOMAIN_CHOICES]
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
        "error_shown",
        "duration_ms",
        "served_from_job",
        "served_from_attempt",
    )
    readonly_fields = fields

    @admin.display(description="error")
    def error_shown(self, obj: Attempt) -> str:
        return error_readable(obj.error)


class AttemptErrorClassFilter(admin.SimpleListFilter):
    """The attempts' error class, from the known classes (no scan to find the ones in use)."""

    title = "error class"
    parameter_name = "error_class"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return known_error_class_choices(self.value())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Attempt]) -> QuerySet[Attempt]:
        value = self.value()
        return queryset.filter(error_class=value) if value else queryset


@admin.register(Job)
class JobAdmin(ScaledListMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
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
    inlines = (AttemptInline,)
    actions = ("cancel_jobs", "requeue_jobs")
    # The page answers "what happened to this job" first: the summary, then the attempts (the
    # template templates/admin/jobs/job/change_form.html puts them right after it), then the rest.
    # Headers and body are shown masked: they may carry the target's credentials.
    fieldsets = (
        (
            "Summary",
            {
                "fields": (
                    "id",
                    "tenant",
                    "status",
                    "waiting_for",
                    "url",
                    "attempts_of_max",
                    "last_error_shown",
                    "result_link",
                    "created_at",
                    "started_at",
                    "finished_at",
                )
            },
        ),
        (
            "Request",
            {"fields": ("method", "domain", "headers_shown", "body_shown", "callback_url")},
        ),
        (
            "Options",
            {
                "classes": ("collapse",),
                "fields": (
                    "priority",
                    "timeout_s",
                    "max_age_s",
                    "max_attempts",
                    "attempt_budget",
                    "idempotency_key",
                ),
            },
        ),
        (
            "Lease and delivery",
            {
                "classes": ("collapse",),
                "fields": (
                    "not_before",
                    "cancel_requested_at",
                    "lease_owner",
                    "lease_expires_at",
                    "published_at",
                    "final_published_at",
                ),
            },
        ),
        (
            "Result",
            {
                "classes": ("collapse",),
                "fields": (
                    "result_key",
                    "result_size",
                    "result_sha256",
                    "result_content_type",
                    "result_http_status",
                    "result_stored_at",
                ),
            },
        ),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        shown = [
            "attempts_of_max",
            "last_error_shown",
            "result_link",
            "headers_shown",
            "body_shown",
            "waiting_for",
        ]
        return [f.name for f in Job._meta.fields] + shown

    @admin.display(description="waiting for")
    def waiting_for(self, obj: Job) -> str:
        """The same answer as GET /jobs/{id}: why a queued job has not started."""
        wait = job_waiting_for(obj, now=timezone.now())
        if wait.waiting_for is None:
            return "-"
        return f"{wait.waiting_for} until {wait.until.isoformat()}" if wait.until else wait.waiting_for

    @admin.display(description="attempts")
    def attempts_of_max(self, obj: Job) -> str:
        # Counted attempts of the limit; deferred ones (NFR-24) are not counted.
        counted = f"{counted_attempts(attempts=obj.attempts, deferred_attempts=obj.deferred_attempts)}/{obj.max_attempts}"
        return f"{counted} (+{obj.deferred_attempts} deferred)" if obj.deferred_attempts else counted

    @admin.display(description="last error")
    def last_error_shown(self, obj: Job) -> str:
        return last_error_readable(obj.last_error) or "-"

    @admin.display(description="result")
    def result_link(self, obj: Job) -> str:
        """The API's result path for a stored result (it answers the tenant's token with a signed
        link; apps/results/admin.py shows a link an operator can open)."""
        if not obj.result_key:
            return "-"
        return f"stored ({obj.result_size} bytes, {obj.result_content_type or 'unknown type'})"

    @admin.display(description="headers")
    def headers_shown(self, obj: Job) -> str:
        masked = headers_masked(obj.headers)
        if not masked:
            return "-"
        return format_html(
            "<br>".join(["{}: {}"] * len(masked)), *(x for item in masked.items() for x in item)
        )

    @admin.display(description="body")
    def body_shown(self, obj: Job) -> str:
        return body_masked(obj.body)

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
class AttemptAdmin(ScaledListMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "job",
        "number",
        "worker",
        "started_at",
        "finished_at",
        "outcome",
        "http_status",
        "error_class",
        "error_shown",
        "duration_ms",
        "served_from_job",
    )
    list_filter = ("outcome", AttemptErrorClassFilter)
    list_select_related = ("job",)
    raw_id_fields = ("job",)
    ordering = ("-id",)  # newest first on the primary key, no sort of the whole table
    search_fields = ("=job__id",)
    search_help_text = "A job id (exact): that job's attempts."

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Attempt._meta.fields] + ["error_shown"]

    @admin.display(description="error")
    def error_shown(self, obj: Attempt) -> str:
        return error_readable(obj.error)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Attempt], search_term: str
    ) -> tuple[QuerySet[Attempt], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False  # no search: every attempt, newest first
        try:
            return queryset.filter(job_id=uuid.UUID(term)), False
        except ValueError:
            messages.warning(request, f"{term!r} is not a job id; attempts are found by their job's id.")
            return queryset.none(), False
