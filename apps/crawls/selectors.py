"""Reads for the crawl endpoints and GET /jobs?crawl=; every read is scoped by tenant."""

from __future__ import annotations

import uuid

from apps.crawls.models import Crawl, CrawlPage
from apps.jobs.models import Job


def _parsed(raw: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None


def crawl_get(*, tenant_id: uuid.UUID, crawl_id: str) -> Crawl | None:
    """The tenant's crawl, or None (missing, malformed id, or another tenant's: all alike)."""
    parsed = _parsed(crawl_id)
    if parsed is None:
        return None
    return Crawl.objects.filter(id=parsed, tenant_id=tenant_id).first()


def crawl_exists(*, tenant_id: uuid.UUID, crawl_id: uuid.UUID) -> bool:
    return Crawl.objects.filter(id=crawl_id, tenant_id=tenant_id).exists()


def crawl_list(
    *, tenant_id: uuid.UUID, before: uuid.UUID | None, limit: int
) -> tuple[list[Crawl], uuid.UUID | None]:
    """The tenant's crawls, newest first (crawls_tenant_newest); the next page's cursor id."""
    qs = Crawl.objects.filter(tenant_id=tenant_id)
    if before is not None:
        qs = qs.filter(id__lt=before)
    rows = list(qs.order_by("-id")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (rows[-1].id if more and rows else None)


def crawl_pages(*, crawl_id: uuid.UUID, after: int, limit: int) -> list[CrawlPage]:
    """The crawl's pages in the order they were taken, after sequence ``after``."""
    return list(CrawlPage.objects.filter(crawl_id=crawl_id, seq__gt=after).order_by("seq")[:limit])


def crawl_page_statuses(job_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The status of each page's job."""
    return dict(Job.objects.filter(id__in=job_ids).values_list("id", "status"))
