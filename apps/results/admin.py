"""The job page's link to its result: an operator opens what the target answered
without a tenant's token.

``apps.jobs`` cannot make the link (it sits below ``apps.results``), so the job admin registered
there is replaced by this subclass, which only renders its ``result_link`` field as a signed,
expiring link (the same link the API hands out, with the default lifetime).
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from apps.jobs.admin import JobAdmin
from apps.jobs.models import Job
from apps.results.selectors import ResultGone, result_link


class JobWithResultLinkAdmin(JobAdmin):
    @admin.display(description="result")
    def result_link(self, obj: Job) -> str:
        stored = super().result_link(obj)
        if not obj.result_key:
            return stored
        try:
            link = result_link(job=obj)
        except ResultGone:
            return f"{stored}; the body is gone (deleted by retention)"
        expires = link.expires_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        return format_html(
            '<a href="{}">open the result</a> {} (link valid until {})', link.url, stored, expires
        )


admin.site.unregister(Job)
admin.site.register(Job, JobWithResultLinkAdmin)
