"""Discovery (FR-40 to FR-43, docs/crawls.md): reading the links of a running crawl's ended pages
and its sitemaps, off the hot path.

Beat's ``crawls-expand`` (the control process) looks at the pages of running crawls whose job is
final and whose links are not read yet (``expanded_at`` NULL). The writer's fold and a plain job's
path do nothing for crawls (NFR-15's budget). A page is expanded once: its ``expanded_at`` is set
by a conditional UPDATE in the same transaction as the pages it adds (apps/crawls/pages.py). A
crawl ends when it has no page left to expand: every job of it is final and every link read.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from apps.crawls.links import (
    PageLinks,
    RobotsJudge,
    Scope,
    links_read,
    robots_header_nofollow,
    urls_normalised,
)
from apps.crawls.models import Crawl, CrawlPage, CrawlPageKind, CrawlSitemaps, CrawlStatus
from apps.crawls.pages import BacklogPause, Candidate, pages_take
from apps.crawls.services import crawl_end_if_done
from apps.crawls.sitemaps import MAX_BYTES as SITEMAP_MAX_BYTES
from apps.crawls.sitemaps import SitemapEntries, SitemapRefused, sitemap_read
from apps.jobs.fetch_keys import normalised_url
from apps.politeness.robots_rules import product_token
from apps.redis_clients import state_redis
from apps.results.storage import result_read_chunks

logger = logging.getLogger(__name__)

_HTML_TYPES = ("text/html", "application/xhtml+xml")
# A sitemap index's sitemaps are followed this many levels below the first ones (FR-43).
SITEMAP_MAX_LEVEL = 2


class _Unreadable(Exception):
    """A page's stored body cannot be read now (the storage failed): the page stays unread."""


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


# Uses crawl_pages_pending, then each job by its primary key.
_ENDED_PAGES_SQL = """
    SELECT p.id, p.seq, p.depth, j.status, j.result_key, j.result_content_type,
           j.result_final_url, j.url, j.result_headers, p.kind
      FROM crawls_crawlpage p JOIN jobs_job j ON j.id = p.job_id
     WHERE p.crawl_id = %s AND p.expanded_at IS NULL
       AND j.status IN ('succeeded', 'failed', 'cancelled', 'erased')
     ORDER BY p.seq
     LIMIT %s
"""


def _ended_pages(crawl_id: uuid.UUID, *, limit: int) -> list[_EndedPage]:
    """Pages of the crawl not expanded yet whose job is final, lowest sequence first."""
    with connection.cursor() as cur:
        cur.execute(_ENDED_PAGES_SQL, [crawl_id, limit])
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


@dataclass(frozen=True)
class _Reading:
    """What one ended page gave: its links, the sitemaps it names, and their depth."""

    found: PageLinks
    depth: int
    sitemaps: list[str]
    left_scope: bool = False


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
        try:
            reading = _page_read(crawl, page, scope, robots)
        except _Unreadable:
            logger.warning("crawl page %s: its stored body cannot be read now", page.id, exc_info=True)
            continue
        try:
            if not _page_record(crawl_id, page, reading, scope, robots):
                continue  # another expander read it first
        except BacklogPause:
            return expanded  # the tenant's backlog is full: this crawl waits, and does not end
        expanded += 1
    crawl_end_if_done(crawl_id)
    return expanded


def _page_read(crawl: Crawl, page: _EndedPage, scope: Scope, robots: RobotsJudge) -> _Reading:
    """An ended page's links (or a sitemap's entries) and the sitemaps it leads to, outside any
    transaction; raises ``_Unreadable`` when its stored body cannot be read now."""
    if page.kind == CrawlPageKind.SITEMAP:
        # A sitemap's pages are depth 1 (FR-43); an index's sitemaps one level down.
        entries = sitemap_entries(page)
        found = PageLinks(links=urls_normalised(entries.pages, base=page.final_url or page.url))
        if crawl.max_depth < 1:
            found = PageLinks()
        sitemaps: list[str] = []
        if page.depth < SITEMAP_MAX_LEVEL:
            sitemaps = urls_normalised(entries.sitemaps, base=page.final_url or page.url)
        return _Reading(found=found, depth=1, sitemaps=sitemaps)
    # Links of the last layer would all be too deep: their body is not read at all. Nor those of
    # a page redirected out of the scope: another site's (FR-42); nor any with sitemaps "only"
    # (FR-43).
    left_scope = _redirected_out_of_scope(page, scope)
    reads = page.depth < crawl.max_depth and not left_scope and crawl.sitemaps != CrawlSitemaps.ONLY
    found = page_links(page) if reads else PageLinks()
    sitemaps = []
    if page.depth == 0 and crawl.sitemaps != CrawlSitemaps.SKIP:
        sitemaps = _seed_sitemaps(page.url, robots)
    return _Reading(found=found, depth=page.depth + 1, sitemaps=sitemaps, left_scope=left_scope)


def _page_record(
    crawl_id: uuid.UUID, page: _EndedPage, reading: _Reading, scope: Scope, robots: RobotsJudge
) -> bool:
    """In one transaction: mark the page expanded, take its new pages and sitemaps, count what
    was skipped. False when another expander marked it first; raises ``BacklogPause``."""
    links = reading.found.links
    in_scope = [link for link in links if scope.in_scope(link)]
    kept = [link for link in in_scope if not robots.disallows(link)]
    with transaction.atomic():
        marked = CrawlPage.objects.filter(id=page.id, expanded_at__isnull=True).update(expanded_at=Now())
        if not marked:
            return False
        pages_take(
            crawl_id,
            [Candidate(url=link, depth=reading.depth, found_on=page.seq) for link in kept],
            discovered=len(links) + reading.found.nofollow,
            backlog=True,
        )
        if reading.sitemaps:
            level = page.depth + 1 if page.kind == CrawlPageKind.SITEMAP else 0
            pages_take(
                crawl_id,
                [Candidate(url=url, depth=level, found_on=page.seq) for url in reading.sitemaps],
                kind=CrawlPageKind.SITEMAP,
            )
        Crawl.objects.filter(id=crawl_id).update(
            skipped_out_of_scope=F("skipped_out_of_scope") + (len(links) - len(in_scope)),
            skipped_robots=F("skipped_robots") + (len(in_scope) - len(kept)),
            skipped_nofollow=F("skipped_nofollow") + reading.found.nofollow,
            skipped_redirect=F("skipped_redirect") + int(reading.left_scope),
        )
    return True


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
