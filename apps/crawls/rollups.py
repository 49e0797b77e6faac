"""Reads of the crawls for the operators' rollups, dashboard and ``/metrics`` (FR-46): each
bounded by an index, so their cost does not grow with the crawls kept."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count

from apps.crawls.models import Crawl, CrawlStatus


def crawls_ended_between(*, after: datetime | None, upto: datetime) -> dict[str, int]:
    """Crawls whose ``finished_at`` is in (after, upto], by status (crawls_finished)."""
    qs = Crawl.objects.filter(finished_at__isnull=False, finished_at__lte=upto)
    if after is not None:
        qs = qs.filter(finished_at__gt=after)
    return dict(qs.values_list("status").annotate(n=Count("id")).values_list("status", "n"))


def crawls_running_count() -> int:
    """Crawls running now (crawls_running)."""
    return Crawl.objects.filter(status=CrawlStatus.RUNNING).count()


def crawls_running_newest(*, limit: int) -> list[Crawl]:
    """The newest running crawls, for the dashboard (crawls_running, then the newest by id)."""
    return list(
        Crawl.objects.filter(status=CrawlStatus.RUNNING).select_related("tenant").order_by("-id")[:limit]
    )
