"""Taking a crawl's pages (FR-40, docs/crawls.md): the one place where links become pages and
jobs, exactly within the crawl's budget.

Pages are taken under the crawl row's lock (``SELECT … FOR UPDATE``), in the transaction that
inserts the pages (unique on (crawl, normalised URL): the exact dedupe) and creates their jobs
through apps/jobs. Every taker of one crawl waits for the one before to commit and then sees its
count, so ``pages`` never passes ``max_pages`` however many expanders race (and a CHECK constraint
on the row says so too).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.db.models import F
from django.db.models.functions import Now

from apps.crawls.links import link_domain
from apps.crawls.models import Crawl, CrawlPage, CrawlPageKind, CrawlStatus
from apps.jobs.intake import jobs_create_grouped
from apps.jobs.selectors import tenant_queued_count
from apps.tenants.backlog import tenant_queued_cap
from apps.tenants.models import Tenant


class BacklogPause(Exception):
    """Inside an expansion: the page's new links do not fit in the tenant's backlog now; roll
    back, and leave the page (and the crawl) for a later expansion."""


@dataclass(frozen=True)
class Candidate:
    url: str  # normalised: also the dedupe key
    depth: int
    found_on: int | None


def backlog_room(tenant_id: uuid.UUID) -> int | None:
    """How many more jobs the tenant may have queued (FR-20), or None without a cap."""
    cap = tenant_queued_cap(Tenant.objects.only("max_queued_jobs").get(id=tenant_id))
    if cap <= 0:
        return None
    return cap - tenant_queued_count(tenant_id=tenant_id, at_most=cap)


def pages_take(
    crawl_id: uuid.UUID,
    candidates: Sequence[Candidate],
    *,
    discovered: int = 0,
    backlog: bool = False,
    kind: str = CrawlPageKind.PAGE,
) -> int:
    """Inside the caller's transaction: the new ones among ``candidates`` (distinct URLs) become
    pages and jobs, as many as the crawl's budget has room for (FR-40). Returns how many.
    ``backlog``: raise ``BacklogPause`` when they do not fit in the tenant's backlog (FR-20),
    unless it has no job queued at all (a page with more links than the whole cap still goes).
    ``kind`` sitemap: sitemap documents (FR-43), within SCRAPEJOBS_CRAWL_MAX_SITEMAPS and not
    within ``max_pages``; their jobs take the crawl's options but are never rendered."""
    if not connection.in_atomic_block:
        raise RuntimeError("pages_take needs the caller's transaction")
    crawl = Crawl.objects.select_for_update().get(id=crawl_id)
    if crawl.status != CrawlStatus.RUNNING:
        return 0
    known = set(
        CrawlPage.objects.filter(crawl_id=crawl_id, url_key__in=[c.url for c in candidates]).values_list(
            "url_key", flat=True
        )
    )
    new = [c for c in candidates if c.url not in known]
    sitemap = kind == CrawlPageKind.SITEMAP
    if sitemap:
        room = settings.SCRAPEJOBS_CRAWL_MAX_SITEMAPS - crawl.sitemap_documents
    else:
        room = crawl.max_pages - crawl.pages
    taken = new[: max(room, 0)]
    if backlog and taken:
        left = backlog_room(crawl.tenant_id)
        if left is not None and len(taken) > left and left < tenant_queued_cap(crawl.tenant):
            raise BacklogPause()
    _pages_insert(crawl, taken, kind=kind)
    if sitemap:
        Crawl.objects.filter(id=crawl.id).update(
            sitemap_documents=F("sitemap_documents") + len(taken), updated_at=Now()
        )
        return len(taken)
    Crawl.objects.filter(id=crawl.id).update(
        pages=F("pages") + len(taken),
        discovered=F("discovered") + discovered,
        skipped_duplicate=F("skipped_duplicate") + (len(candidates) - len(new)),
        skipped_over_limit=F("skipped_over_limit") + (len(new) - len(taken)),
        updated_at=Now(),
    )
    return len(taken)


def _pages_insert(crawl: Crawl, taken: Sequence[Candidate], *, kind: str) -> None:
    """The pages' jobs (through apps/jobs) and their rows, numbered after the crawl's last."""
    # Pages and sitemaps share the crawl's sequence (the jobs' batch_row).
    first = crawl.pages + crawl.sitemap_documents + 1
    rows = [(first + i, c.url, link_domain(c.url)) for i, c in enumerate(taken)]
    options = crawl.job_options
    if kind == CrawlPageKind.SITEMAP:
        options = {k: v for k, v in options.items() if k not in ("render", "browser_options", "revalidate")}
    job_ids = jobs_create_grouped(tenant_id=crawl.tenant_id, group_id=crawl.id, rows=rows, options=options)
    CrawlPage.objects.bulk_create(
        [
            CrawlPage(
                crawl_id=crawl.id,
                seq=seq,
                url_key=c.url,
                depth=c.depth,
                kind=kind,
                found_on=c.found_on,
                job_id=job_id,
            )
            for (seq, _, _), c, job_id in zip(rows, taken, job_ids, strict=True)
        ]
    )
