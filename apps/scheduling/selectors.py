"""Reads for the dead letters (FR-8)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet
from django.db.models.fields.json import KT

from apps.scheduling.models import DeadLetter

NO_CLASS = "(none)"


def dead_letters_annotated() -> QuerySet[DeadLetter]:
    """Open dead letters with their last error's class and HTTP status as plain columns."""
    return DeadLetter.objects.annotate(
        error_class=KT("last_error__class"),
        error_http_status=KT("last_error__http_status"),
    )


# The grouped page counts the newest dead letters only: grouping every failed job of a large
# ledger (80,000 of a million) took seconds; the newest few thousand say what is wrong now, and
# the range of them is read from the jobs_dead_letter_newest index.
GROUP_WINDOW = 5_000


def dead_letters_window_start(*, window: int = GROUP_WINDOW) -> datetime | None:
    """When the ``window``-th newest open dead letter failed (None: there are fewer)."""
    newest = dead_letters_annotated().order_by("-finished_at").values_list("finished_at", flat=True)
    return next(iter(newest[window - 1 : window]), None)


def dead_letters_grouped(*, limit: int = 200, since: datetime | None = None) -> list[dict[str, Any]]:
    """One row per (domain, last error class, HTTP status) with a count, biggest first: a
    hundred jobs to one domain answering 401 are one problem, one expired key.
    ``since``: only dead letters that failed then or later (``dead_letters_window_start``)."""
    # values() by name: the annotations are not model fields, which the type checker only knows.
    columns = ("domain", "error_class", "error_http_status")
    recent = dead_letters_annotated()
    if since is not None:
        recent = recent.filter(finished_at__gte=since)
    rows = (
        recent.values(*columns)
        .annotate(
            count=Count("id"),
            tenants=Count("tenant", distinct=True),
            first=Min("finished_at"),
            last=Max("finished_at"),
        )
        .order_by("-count", "domain", "error_class")[:limit]
    )
    return [
        {
            **row,
            "error_class": row["error_class"] or NO_CLASS,
            "error_http_status": row["error_http_status"] or "",
        }
        for row in rows
    ]


def dead_letters_in_group(*, domain: str, error_class: str, http_status: str) -> QuerySet[DeadLetter]:
    """The open dead letters of one group of ``dead_letters_grouped`` (its values as shown)."""
    qs = dead_letters_annotated().filter(domain=domain)
    # Q objects: the annotations are not model fields, and the type checker only knows fields.
    qs = qs.filter(Q(error_class__isnull=True) if error_class == NO_CLASS else Q(error_class=error_class))
    return qs.filter(Q(error_http_status=http_status) if http_status else Q(error_http_status__isnull=True))
