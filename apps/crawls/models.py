"""Crawls (FR-39, FR-40, FR-41, docs/crawls.md): seed URLs, a scope and an exact page limit;
every page found is an ordinary job of jobs_job keyed as a batch's rows are (``batch_id`` = the
crawl, ``batch_row`` = the page's sequence), so listing, counting and cancelling are the batches'
and a plain job pays nothing for crawls. ``CrawlPage`` is the crawl's ledger of pages: one row per
distinct normalised URL (the exact dedupe), with its depth and whether its links were read."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from apps.jobs.ids import uuid7


class CrawlStatus(models.TextChoices):
    RUNNING = "running"
    COMPLETED = "completed"  # every page's job final and every page's links read
    CANCELLED = "cancelled"


class CrawlScope(models.TextChoices):
    SAME_ORIGIN = "same_origin"  # a seed's scheme, host and port
    SAME_SITE = "same_site"  # a seed host's registrable domain (apps/politeness/domains.py)
    PREFIX = "prefix"  # a seed's origin and the path up to its last "/"


class CrawlSitemaps(models.TextChoices):
    INCLUDE = "include"  # the seeds' origins' sitemaps add pages at depth 1; links followed too
    ONLY = "only"  # the sitemaps' pages only: no page's links are read
    SKIP = "skip"  # no sitemap fetched


class CrawlPageKind(models.TextChoices):
    PAGE = "page"
    SITEMAP = "sitemap"  # a sitemap document: a job of the crawl, not one of its max_pages (FR-43)


class Crawl(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="crawls")
    status = models.CharField(max_length=16, choices=CrawlStatus.choices, default=CrawlStatus.RUNNING)
    # The start pages (depth 0), as given: 1 to 100 URLs.
    seeds = models.JSONField(default=list)
    scope = models.CharField(max_length=16, choices=CrawlScope.choices, default=CrawlScope.SAME_ORIGIN)
    include = models.JSONField(default=list, blank=True)
    exclude = models.JSONField(default=list, blank=True)
    max_pages = models.PositiveIntegerField()
    max_depth = models.PositiveSmallIntegerField()
    sitemaps = models.CharField(max_length=8, choices=CrawlSitemaps.choices, default=CrawlSitemaps.INCLUDE)
    # The per-page job options (validated as POST /jobs validates them).
    job_options = models.JSONField(default=dict, blank=True)
    # Pages that became jobs: taken under the crawl row's lock in the transaction that creates
    # them, never above max_pages (FR-40).
    pages = models.PositiveIntegerField(default=0)
    # Links read from pages (every href kept after resolving), and those skipped, by reason.
    discovered = models.PositiveIntegerField(default=0)
    skipped_duplicate = models.PositiveIntegerField(default=0)
    skipped_out_of_scope = models.PositiveIntegerField(default=0)
    skipped_over_limit = models.PositiveIntegerField(default=0)
    # Disallowed by the origin's robots.txt as the workers had it cached (no job made for them).
    skipped_robots = models.PositiveIntegerField(default=0)
    # Not followed: rel="nofollow" on the link, or the page's meta robots / X-Robots-Tag (FR-42).
    skipped_nofollow = models.PositiveIntegerField(default=0)
    # Pages redirected out of the scope: fetched (the worker follows redirects as for any job),
    # their links not read (FR-42).
    skipped_redirect = models.PositiveIntegerField(default=0)
    # Sitemap documents that became jobs of the crawl: at most SCRAPEJOBS_CRAWL_MAX_SITEMAPS,
    # apart from ``pages`` (FR-43).
    sitemap_documents = models.PositiveIntegerField(default=0)
    callback_url = models.TextField(null=True, blank=True)
    callback_enqueued_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    idempotency_fingerprint = models.CharField(max_length=64, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="crawls_unique_idempotency_key_per_tenant",
            ),
            models.CheckConstraint(
                condition=Q(pages__lte=models.F("max_pages")), name="crawls_pages_within_max"
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "-id"], name="crawls_tenant_newest"),
            # crawls_expand (apps/crawls/expansion.py): the crawls still running.
            models.Index(fields=["id"], condition=Q(status="running"), name="crawls_running"),
            # crawls_ended_between (apps/crawls/rollups.py): the rollup's window of ended crawls.
            models.Index(
                fields=["finished_at"], condition=Q(finished_at__isnull=False), name="crawls_finished"
            ),
        ]

    def __str__(self) -> str:
        return f"crawl {self.id} [{self.status}]"


class CrawlPage(models.Model):
    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="page_rows")
    # The page's job's batch_row: 1, 2, ... in the order pages were taken.
    seq = models.PositiveIntegerField()
    # The URL as single-flight's fetch key normalises it (apps/jobs/singleflight.py): the dedupe key.
    url_key = models.TextField()
    # A page: links from a seed. A sitemap: its level (0 from robots.txt or /sitemap.xml, 1 from an index).
    depth = models.PositiveSmallIntegerField()
    kind = models.CharField(max_length=8, choices=CrawlPageKind.choices, default=CrawlPageKind.PAGE)
    found_on = models.PositiveIntegerField(null=True, blank=True)  # the seq of the page linking here
    job_id = models.UUIDField()
    # When its links were read (or it ended without any to read): NULL while discovery is pending.
    expanded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["crawl", "url_key"], name="crawl_pages_unique_url"),
            models.UniqueConstraint(fields=["crawl", "seq"], name="crawl_pages_unique_seq"),
        ]
        indexes = [
            models.Index(
                fields=["crawl", "seq"], condition=Q(expanded_at__isnull=True), name="crawl_pages_pending"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.crawl_id} page {self.seq}"
