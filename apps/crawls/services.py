"""Crawls (FR-39 to FR-41, docs/crawls.md): create one, take pages exactly within its limit,
read the links of its pages that succeeded, end it, cancel it.

Pages are taken in one place, ``_pages_take``: under the crawl row's lock (``SELECT … FOR
UPDATE``), in the transaction that inserts the pages (unique on (crawl, normalised URL): the exact
dedupe) and creates their jobs through apps/jobs. Every taker of one crawl waits for the one
before to commit and then sees its count, so ``pages`` never passes ``max_pages`` however many
expanders race (and a CHECK constraint on the row says so too).

Discovery runs off the hot path: beat's ``crawls-expand`` (the control process) looks at the
pages of running crawls whose job is final and whose links are not read yet (``expanded_at``
NULL). The writer's fold and a plain job's path do nothing for crawls (NFR-15's budget). A page
is expanded once: its ``expanded_at`` is set by a conditional UPDATE in the same transaction as
the pages it adds. A crawl ends when it has no page left to expand: every job of it is final and
every link read.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from apps.crawls.links import (
    PageLinks,
    RobotsJudge,
    Scope,
    link_domain,
    links_read,
    robots_header_nofollow,
    urls_normalised,
)
from apps.crawls.models import Crawl, CrawlPage, CrawlPageKind, CrawlSitemaps, CrawlStatus
from apps.crawls.sitemaps import MAX_BYTES as SITEMAP_MAX_BYTES
from apps.crawls.sitemaps import SitemapEntries, SitemapRefused, sitemap_read
from apps.jobs.cancel_requeue import jobs_cancel_batch
from apps.jobs.fetch_keys import normalised_url
from apps.jobs.intake import jobs_create_grouped
from apps.jobs.selectors import tenant_queued_count
from apps.politeness.robots import product_token
from apps.redis_clients import state_redis
from apps.results.storage import result_read_chunks
from apps.tenants.backlog import backlog_full, tenant_queued_cap
from apps.tenants.models import Tenant
from apps.webhooks.services import webhook_delivery_create_for_batch

logger = logging.getLogger(__name__)

EVENT_COMPLETED = "crawl.completed"
EVENT_CANCELLED = "crawl.cancelled"
_HTML_TYPES = ("text/html", "application/xhtml+xml")
# A sitemap index's sitemaps are followed this many levels below the first ones (FR-43).
SITEMAP_MAX_LEVEL = 2


class CrawlIdempotencyConflict(Exception):
    """The Idempotency-Key was used before for another crawl body."""


class _Unreadable(Exception):
    """A page's stored body cannot be read now (the storage failed): the page stays unread."""


class _BacklogPause(Exception):
    """Inside an expansion: the page's new links do not fit in the tenant's backlog now; roll
    back, and leave the page (and the crawl) for a later expansion."""


@dataclass(frozen=True)
class Candidate:
    url: str  # normalised: also the dedupe key
    depth: int
    found_on: int | None


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
    room = _backlog_room(tenant_id)
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
            _pages_take(crawl.id, [Candidate(url=url, depth=0, found_on=None) for url in starts])
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


def _backlog_room(tenant_id: uuid.UUID) -> int | None:
    """How many more jobs the tenant may have queued (FR-20), or None without a cap."""
    cap = tenant_queued_cap(Tenant.objects.only("max_queued_jobs").get(id=tenant_id))
    if cap <= 0:
        return None
    return cap - tenant_queued_count(tenant_id=tenant_id, at_most=cap)


def _pages_take(
    crawl_id: uuid.UUID,
    candidates: Sequence[Candidate],
    *,
    discovered: int = 0,
    backlog: bool = False,
    kind: str = CrawlPageKind.PAGE,
) -> int:
    """Inside the caller's transaction: the new ones among ``candidates`` (distinct URLs) become
    pages and jobs, as many as the crawl's budget has room for (FR-40). Returns how many.
    ``backlog``: raise ``_BacklogPause`` when they do not fit in the tenant's backlog (FR-20),
    unless it has no job queued at all (a page with more links than the whole cap still goes).
    ``kind`` sitemap: sitemap documents (FR-43), within SCRAPEJOBS_CRAWL_MAX_SITEMAPS and not
    within ``max_pages``; their jobs take the crawl's options but are never rendered."""
    if not connection.in_atomic_block:
        raise RuntimeError("_pages_take needs the caller's transaction")
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
        left = _backlog_room(crawl.tenant_id)
        if left is not None and len(taken) > left and left < tenant_queued_cap(crawl.tenant):
            raise _BacklogPause()
    # Pages and sitemaps share the crawl's sequence (the jobs' batch_row).
    first = crawl.pages + crawl.sitemap_documents + 1
    rows = [(first + i, c.url, link_domain(c.url)) for i, c in enumerate(taken)]
    options = crawl.job_options
    if sitemap:
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


@dataclass(frozen=True)
class _EndedPage:
    id: int
    seq: int
    depth: int
    status: str
    result_key: str | None
    content_type: str | None
    final_url: str | None
    url: str
    headers: dict[str, str] | None
    kind: str


def _ended_pages(crawl_id: uuid.UUID, *, limit: int) -> list[_EndedPage]:
    """Pages of the crawl not expanded yet whose job is final, lowest sequence first."""
    with connection.cursor() as cur:
        # Uses crawl_pages_pending, then each job by its primary key.
        cur.execute(
            """
            SELECT p.id, p.seq, p.depth, j.status, j.result_key, j.result_content_type,
                   j.result_final_url, j.url, j.result_headers, p.kind
              FROM crawls_crawlpage p JOIN jobs_job j ON j.id = p.job_id
             WHERE p.crawl_id = %s AND p.expanded_at IS NULL
               AND j.status IN ('succeeded', 'failed', 'cancelled', 'erased')
             ORDER BY p.seq
             LIMIT %s
            """,
            [crawl_id, limit],
        )
        return [
            _EndedPage(
                id=row[0],
                seq=row[1],
                depth=row[2],
                status=row[3],
                result_key=row[4],
                content_type=row[5],
                final_url=row[6],
                url=row[7],
                headers=_json_of(row[8]),
                kind=row[9],
            )
            for row in cur.fetchall()
        ]


def _json_of(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _is_html(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() in _HTML_TYPES


def _charset(content_type: str | None) -> str | None:
    for param in (content_type or "").split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return None


def page_links(page: _EndedPage) -> PageLinks:
    """The links of a page that succeeded with HTML, read from its stored body by a streaming
    parser fed it in chunks (the body is never held whole; its first
    SCRAPEJOBS_CRAWL_PAGE_MAX_BYTES are read); none otherwise. Whatever way the page arrived,
    its stored body is the page: a plain fetch's, a rendered page's HTML after its scripts ran,
    a single-flight copy's shared body (its result_key). ``X-Robots-Tag: nofollow`` on the
    stored response headers makes all its links ``nofollow`` (FR-42)."""
    if page.status != "succeeded" or not page.result_key or not _is_html(page.content_type):
        return PageLinks()
    try:
        found = links_read(
            result_read_chunks(key=page.result_key, max_bytes=settings.SCRAPEJOBS_CRAWL_PAGE_MAX_BYTES),
            page_url=page.final_url or page.url,
            charset=_charset(page.content_type),
            product=_product(),
        )
    except FileNotFoundError:  # gone (retention): there is nothing to read, ever
        logger.warning("crawl page %s: its stored body is gone", page.id)
        return PageLinks()
    except Exception as e:  # noqa: BLE001 - any backend's failure: read again at the next expansion
        raise _Unreadable() from e
    if robots_header_nofollow((page.headers or {}).get("x-robots-tag"), product=_product()):
        return PageLinks(links=[], nofollow=len(found.links) + found.nofollow)
    return found


def _product() -> str:
    return product_token(settings.SCRAPEJOBS_FETCH_USER_AGENT).lower()


def _seed_sitemaps(seed: str, robots: RobotsJudge) -> list[str]:
    """A seed's origin's sitemaps (FR-43): its robots.txt's ``Sitemap:`` lines as the workers
    have the file cached (the seed's own job has just read it; never fetched for this), then
    ``/sitemap.xml``; normalised, each once."""
    parts = urlsplit(seed)
    default = f"{parts.scheme}://{parts.netloc}/sitemap.xml"
    return urls_normalised([*robots.sitemaps(seed), default], base=seed)


def sitemap_entries(page: _EndedPage) -> SitemapEntries:
    """The entries of a sitemap document that succeeded, read from its stored body in chunks
    (apps/crawls/sitemaps.py); none when it failed, is gone or is refused (a DTD, too big)."""
    if page.status != "succeeded" or not page.result_key:
        return SitemapEntries()
    try:
        return sitemap_read(result_read_chunks(key=page.result_key, max_bytes=SITEMAP_MAX_BYTES + 1))
    except FileNotFoundError:
        logger.warning("crawl sitemap %s: its stored body is gone", page.id)
    except SitemapRefused as e:
        logger.warning("crawl sitemap %s refused: %s", page.id, e)
    except Exception as e:  # noqa: BLE001 - any backend's failure: read again at the next expansion
        raise _Unreadable() from e
    return SitemapEntries()


def _redirected_out_of_scope(page: _EndedPage, scope: Scope) -> bool:
    """Whether a page that succeeded was redirected to a URL outside the crawl's scope. The
    worker follows redirects as for every job (it knows nothing of crawls: a plain job's path is
    unchanged), so the page was fetched; its links are not read (docs/crawls.md)."""
    if page.status != "succeeded" or not page.final_url:
        return False
    try:
        final = normalised_url(page.final_url)
    except ValueError:
        return True
    return final != page.url and not scope.in_scope(final)


def crawl_expand(crawl_id: uuid.UUID, *, limit: int = 100) -> int:
    """Read the links of up to ``limit`` ended pages of a running crawl and take the new ones;
    then end the crawl if nothing is left to expand. Returns how many pages were expanded."""
    crawl = Crawl.objects.filter(id=crawl_id).first()
    if crawl is None or crawl.status != CrawlStatus.RUNNING:
        return 0
    scope = Scope.of(seeds=crawl.seeds, kind=crawl.scope, include=crawl.include, exclude=crawl.exclude)
    robots = RobotsJudge()
    expanded = 0
    for page in _ended_pages(crawl_id, limit=limit):
        left_scope = False
        sitemaps: list[str] = []
        try:
            if page.kind == CrawlPageKind.SITEMAP:
                # A sitemap's pages are depth 1 (FR-43); an index's sitemaps one level down.
                entries = sitemap_entries(page)
                found = PageLinks(links=urls_normalised(entries.pages, base=page.final_url or page.url))
                if crawl.max_depth < 1:
                    found = PageLinks()
                if page.depth < SITEMAP_MAX_LEVEL:
                    sitemaps = urls_normalised(entries.sitemaps, base=page.final_url or page.url)
                depth = 1
            else:
                # Links of the last layer would all be too deep: their body is not read at all.
                # Nor those of a page redirected out of the scope: another site's (FR-42); nor
                # any with sitemaps "only" (FR-43).
                left_scope = _redirected_out_of_scope(page, scope)
                reads = (
                    page.depth < crawl.max_depth and not left_scope and crawl.sitemaps != CrawlSitemaps.ONLY
                )
                found = page_links(page) if reads else PageLinks()
                depth = page.depth + 1
                if page.depth == 0 and crawl.sitemaps != CrawlSitemaps.SKIP:
                    sitemaps = _seed_sitemaps(page.url, robots)
        except _Unreadable:
            logger.warning("crawl page %s: its stored body cannot be read now", page.id, exc_info=True)
            continue
        links = found.links
        in_scope = [link for link in links if scope.in_scope(link)]
        kept = [link for link in in_scope if not robots.disallows(link)]
        try:
            with transaction.atomic():
                marked = CrawlPage.objects.filter(id=page.id, expanded_at__isnull=True).update(
                    expanded_at=Now()
                )
                if not marked:
                    continue  # another expander read it first
                _pages_take(
                    crawl_id,
                    [Candidate(url=link, depth=depth, found_on=page.seq) for link in kept],
                    discovered=len(links) + found.nofollow,
                    backlog=True,
                )
                if sitemaps:
                    level = page.depth + 1 if page.kind == CrawlPageKind.SITEMAP else 0
                    _pages_take(
                        crawl_id,
                        [Candidate(url=url, depth=level, found_on=page.seq) for url in sitemaps],
                        kind=CrawlPageKind.SITEMAP,
                    )
                Crawl.objects.filter(id=crawl_id).update(
                    skipped_out_of_scope=F("skipped_out_of_scope") + (len(links) - len(in_scope)),
                    skipped_robots=F("skipped_robots") + (len(in_scope) - len(kept)),
                    skipped_nofollow=F("skipped_nofollow") + found.nofollow,
                    skipped_redirect=F("skipped_redirect") + int(left_scope),
                )
        except _BacklogPause:
            return expanded  # the tenant's backlog is full: this crawl waits, and does not end
        expanded += 1
    crawl_end_if_done(crawl_id)
    return expanded


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


def crawl_counts(crawl: Crawl) -> dict[str, Any]:
    """The crawl's pages by their job's status, and its links by what became of them."""
    with connection.cursor() as cur:
        cur.execute("SELECT status, count(*) FROM jobs_job WHERE batch_id = %s GROUP BY status", [crawl.id])
        jobs = dict(cur.fetchall())
        if crawl.sitemap_documents:
            # Sitemap documents are jobs of the crawl but not pages (FR-43): counted apart.
            cur.execute(
                """
                SELECT j.status, count(*) FROM crawls_crawlpage p JOIN jobs_job j ON j.id = p.job_id
                 WHERE p.crawl_id = %s AND p.kind = 'sitemap' GROUP BY j.status
                """,
                [crawl.id],
            )
            for status, n in cur.fetchall():
                jobs[status] -= n
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


def crawls_expand(*, budget_s: float = 20.0, limit: int = 100) -> int:
    """Beat's ``crawls-expand``: every running crawl, ``limit`` pages at a time, round after round
    while time is left and pages wait. Safe to run concurrently (each page is expanded once, each
    crawl ends once); a crawl another run is expanding now (its lease in Redis) is left to that
    run, so overlapping runs share the crawls instead of reading the same pages in the same order
    and queueing on their row locks (docs/benchmarks.md, crawl)."""
    deadline = time.monotonic() + budget_s
    total = 0
    # Uses crawls_running.
    running = list(
        Crawl.objects.filter(status=CrawlStatus.RUNNING).order_by("id").values_list("id", flat=True)
    )
    leases = {crawl_id: _lease_take(crawl_id) for crawl_id in running}
    pending = [crawl_id for crawl_id, token in leases.items() if token != ""]
    try:
        while pending and time.monotonic() <= deadline:
            full = []
            for crawl_id in pending:
                if time.monotonic() > deadline:
                    break
                try:
                    expanded = crawl_expand(crawl_id, limit=limit)
                except Exception:  # one crawl's failure holds back no other crawl; tried again next time
                    logger.exception("expanding crawl %s failed", crawl_id)
                    continue
                total += expanded
                if expanded >= limit:
                    full.append(crawl_id)  # more may wait: another round
            pending = full
    finally:
        for crawl_id, token in leases.items():
            if token:
                _lease_release(crawl_id, token)
    return total


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


_LEASE_S = 30  # past one run (budget_s and a batch): a killed run's lease expires, and a lease that
# expires under a run that is still working only lets a second run overlap it (safe, slower)


def _lease_take(crawl_id: uuid.UUID) -> str | None:
    """A token when this run may expand the crawl now; "" when another run holds it; None when
    Redis cannot say (then expand anyway: concurrent runs are safe, only slower)."""
    token = secrets.token_hex(8)
    try:
        return token if state_redis().set(_lease_key(crawl_id), token, nx=True, ex=_LEASE_S) else ""
    except redis.RedisError:
        return None


def _lease_release(crawl_id: uuid.UUID, token: str) -> None:
    try:
        r = state_redis()
        if r.get(_lease_key(crawl_id)) == token:
            r.delete(_lease_key(crawl_id))
    except redis.RedisError:
        pass  # it expires


def _lease_key(crawl_id: uuid.UUID) -> str:
    return f"crawl-expand:{crawl_id}"
