"""Crawls for operators (FR-46): the list with each crawl's counts, a crawl's page with its
pages by their job's status, and a cancel action through ``crawl_cancel`` (the API's own cancel).
Read-only otherwise: a crawl changes only through its services."""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from apps.admin_mixins import ReadOnlyAdminMixin
from apps.crawls.models import Crawl
from apps.crawls.services import crawl_cancel, crawl_counts


@admin.register(Crawl)
class CrawlAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "tenant",
        "status",
        "pages_of_max",
        "max_depth",
        "scope",
        "discovered",
        "skipped_duplicate",
        "skipped_out_of_scope",
        "skipped_over_limit",
        "skipped_robots",
        "created_at",
        "finished_at",
    )
    list_filter = ("status", "scope", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("=id",)
    ordering = ("-id",)
    fields = (
        "id",
        "tenant",
        "status",
        "seeds",
        "scope",
        "include",
        "exclude",
        "max_pages",
        "max_depth",
        "job_options",
        "pages",
        "pages_by_status",
        "discovered",
        "skipped_duplicate",
        "skipped_out_of_scope",
        "skipped_over_limit",
        "skipped_robots",
        "callback_url",
        "callback_enqueued_at",
        "created_at",
        "updated_at",
        "finished_at",
    )
    readonly_fields = fields
    actions = ("cancel_crawls",)

    @admin.display(description="pages / max", ordering="pages")
    def pages_of_max(self, obj: Crawl) -> str:
        return f"{obj.pages} / {obj.max_pages}"

    @admin.display(description="pages by their job's status")
    def pages_by_status(self, obj: Crawl) -> str:
        return format_html("<pre>{}</pre>", json.dumps(crawl_counts(obj)["pages"], indent=2))

    @admin.action(description="Cancel selected crawls", permissions=["change"])
    def cancel_crawls(self, request: HttpRequest, queryset: QuerySet[Crawl]) -> None:
        crawls = jobs = asked = ended = 0
        for crawl in queryset:
            if crawl.status != "running":
                ended += 1
                continue
            cancelled, requested = crawl_cancel(crawl=crawl)
            crawls, jobs, asked = crawls + 1, jobs + cancelled, asked + requested
        messages.info(
            request,
            f"{crawls} crawls cancelled ({jobs} queued pages cancelled, {asked} running ones asked to "
            f"stop); {ended} already ended and left alone.",
        )
