"""Crawls (FR-39 to FR-41, docs/crawls.md): create one, end it, cancel it, count its pages, erase
its pages' URLs.

Its pages are taken in apps/crawls/pages.py (under the crawl row's lock, exactly within its
limit) and its links read off the hot path in apps/crawls/expansion.py, which ends the crawl here
when it has no page left to expand.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now

from apps.crawls.models import Crawl, CrawlPage, CrawlSitemaps, CrawlStatus
from apps.crawls.pages import Candidate, backlog_room, pages_take
from apps.jobs.cancel_requeue import jobs_cancel_batch
from apps.jobs.fetch_keys import normalised_url
from apps.tenants.backlog import backlog_full, tenant_queued_cap
from apps.tenants.models import Tenant
from apps.webhooks.services import webhook_delivery_create_for_batch

EVENT_COMPLETED = "crawl.completed"
EVENT_CANCELLED = "crawl.cancelled"


class CrawlIdempotencyConflict(Exception):
    """The Idempotency-Key was used before for another crawl body."""


def crawl_create(
    *,
    tenant_id: uuid.UUID,
    seeds: list[str],
    scope: str,
    include: list[str],
    exclude: list[str],
    max_pages: int,
    max_depth: int,
    job_options: dict[str, Any],
    callback_url: str | None,
    idempotency_key: str | None,
    fingerprint: str,
    sitemaps: str = CrawlSitemaps.INCLUDE,
) -> tuple[Crawl, bool]:
    """A new crawl and its seeds' jobs (depth 0, up to ``max_pages``), in one transaction;
    ``(crawl, created)``. A replayed key returns its crawl; a key used with another body raises
    ``CrawlIdempotencyConflict``."""
    if idempotency_key is not None:
        existing = Crawl.objects.filter(tenant_id=tenant_id, idempotency_key=idempotency_key).first()
        if existing is not None:
            return _replayed(existing, fingerprint)
    # Each seed a distinct page, once (the fetch key's normalisation: FR-40).
    starts = list(dict.fromkeys(normalised_url(seed) for seed in seeds))[:max_pages]
    # The start pages are queued jobs (FR-20): refused, as a batch is, when they do not all fit.
    room = backlog_room(tenant_id)
    if room is not None and room < len(starts):
        cap = tenant_queued_cap(Tenant.objects.only("max_queued_jobs").get(id=tenant_id))
        raise backlog_full(queued=cap - max(room, 0), adding=len(starts), cap=cap)
    try:
        with transaction.atomic():
            crawl = Crawl.objects.create(
                tenant_id=tenant_id,
                seeds=seeds,
                scope=scope,
                include=include,
                exclude=exclude,
                max_pages=max_pages,
                max_depth=max_depth,
                sitemaps=sitemaps,
                job_options=job_options,
                callback_url=callback_url,
                idempotency_key=idempotency_key,
                idempotency_fingerprint=fingerprint if idempotency_key else None,
            )
            pages_take(crawl.id, [Candidate(url=url, depth=0, found_on=None) for url in starts])
    except IntegrityError:
        existing = Crawl.objects.filter(tenant_id=tenant_id, idempotency_key=idempotency_key).first()
        if idempotency_key is None or existing is None:
            raise
        return _replayed(existing, fingerprint)
    crawl.refresh_from_db()
    return crawl, True


def _replayed(crawl: Crawl, fingerprint: str) -> tuple[Crawl, bool]:
    if crawl.idempotency_fingerprint != fingerprint:
        raise CrawlIdempotencyConflict()
    return crawl, False


def crawl_end_if_done(crawl_id: uuid.UUID) -> bool:
    """End a running crawl that has no page left to expand (every job final, every link read):
    ``completed`` (its pages' own statuses say how each ended); its callback enqueued in the same
    transaction (FR-41). True when this call ended it."""
    # Looked at first without the lock: a crawl with pages left (the common case) takes none.
    if CrawlPage.objects.filter(crawl_id=crawl_id, expanded_at__isnull=True).exists():
        return False
    with transaction.atomic():
        crawl = Crawl.objects.select_for_update().filter(id=crawl_id, status=CrawlStatus.RUNNING).first()
        if crawl is None or CrawlPage.objects.filter(crawl_id=crawl_id, expanded_at__isnull=True).exists():
            return False
        crawl.status = CrawlStatus.COMPLETED
        Crawl.objects.filter(id=crawl_id).update(status=crawl.status, finished_at=Now(), updated_at=Now())
        _announce(crawl_id, EVENT_COMPLETED)
    return True


def crawl_cancel(*, crawl: Crawl) -> tuple[int, int]:
    """Cancel a crawl: it takes no page from now on, its queued jobs are cancelled and its
    running ones asked to stop, through the jobs' own cancel (FR-41). Returns (cancelled,
    cancel_requested); a crawl already final is left as it is, (0, 0)."""
    with transaction.atomic():
        ended = Crawl.objects.filter(id=crawl.id, status=CrawlStatus.RUNNING).update(
            status=CrawlStatus.CANCELLED, finished_at=Now(), updated_at=Now()
        )
        if ended:
            _announce(crawl.id, EVENT_CANCELLED)
    if not ended:
        return 0, 0
    return jobs_cancel_batch(batch_id=crawl.id, tenant_id=crawl.tenant_id)


def _announce(crawl_id: uuid.UUID, event: str) -> None:
    """Inside the transaction that ends the crawl: its callback, once (a delivery of the webhook
    outbox, signed and retried as a job's)."""
    claimed = Crawl.objects.filter(
        id=crawl_id, callback_url__isnull=False, callback_enqueued_at__isnull=True
    ).update(callback_enqueued_at=Now())
    if not claimed:
        return
    crawl = Crawl.objects.get(id=crawl_id)
    webhook_delivery_create_for_batch(
        tenant_id=crawl.tenant_id,
        batch_id=crawl.id,
        event=event,
        url=crawl.callback_url or "",
        body=json.dumps(crawl_event_body(crawl, event), separators=(",", ":")),
    )


_PAGE_JOBS_BY_STATUS_SQL = """
SELECT j.status, count(*) - count(p.job_id) FROM jobs_job j
  LEFT JOIN crawls_crawlpage p ON p.job_id = j.id AND p.crawl_id = %s AND p.kind = 'sitemap'
 WHERE j.batch_id = %s GROUP BY j.status
"""


def crawl_counts(crawl: Crawl) -> dict[str, Any]:
    """The crawl's pages by their job's status, and its links by what became of them."""
    with connection.cursor() as cur:
        if crawl.sitemap_documents:
            # Sitemap documents are jobs of the crawl but not pages (FR-43): left out in the same
            # statement, so that a job moving on between two reads cannot be counted in one only.
            cur.execute(_PAGE_JOBS_BY_STATUS_SQL, [crawl.id, crawl.id])
        else:
            cur.execute(
                "SELECT status, count(*) FROM jobs_job WHERE batch_id = %s GROUP BY status", [crawl.id]
            )
        jobs = dict(cur.fetchall())
    return {
        "pages": {
            "total": crawl.pages,
            "queued": jobs.get("queued", 0),
            "running": jobs.get("running", 0),
            "succeeded": jobs.get("succeeded", 0),
            "failed": jobs.get("failed", 0),
            "cancelled": jobs.get("cancelled", 0),
            "erased": jobs.get("erased", 0),
        },
        "discovery": {
            "discovered": crawl.discovered,
            "duplicate": crawl.skipped_duplicate,
            "out_of_scope": crawl.skipped_out_of_scope,
            "over_limit": crawl.skipped_over_limit,
            "disallowed": crawl.skipped_robots,
            "nofollow": crawl.skipped_nofollow,
            "sitemaps": crawl.sitemap_documents,
            "out_of_scope_redirect": crawl.skipped_redirect,
        },
    }


def crawl_event_body(crawl: Crawl, event: str) -> dict[str, Any]:
    return {
        "type": event,
        "id": str(crawl.id),
        "status": crawl.status,
        "max_pages": crawl.max_pages,
        **crawl_counts(crawl),
        "created_at": _iso(crawl.created_at),
        "finished_at": _iso(crawl.finished_at),
    }


def _iso(at: Any) -> str | None:
    return None if at is None else at.isoformat().replace("+00:00", "Z")


def crawl_pages_erase(*, job_ids: Sequence[uuid.UUID]) -> int:
    """Erasure (FR-52): a crawl page whose job is erased keeps its place (seq, depth) and loses
    its URL: its dedupe key becomes one no link can have."""
    if not job_ids:
        return 0
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE crawls_crawlpage SET url_key = 'erased:' || job_id::text WHERE job_id = ANY(%s::uuid[])",
            [list(job_ids)],
        )
        return cur.rowcount
