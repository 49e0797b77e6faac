"""Sitemaps of a crawl (FR-43, docs/crawls.md): the seeds' origins' sitemaps (robots.txt's
``Sitemap:`` lines as cached, and ``/sitemap.xml``) are jobs of the crawl of kind ``sitemap``,
outside ``max_pages``; an index's sitemaps are followed two levels down; a gzipped one is inflated
with a bound; ``only`` takes the sitemaps' URLs and follows no link; ``skip`` fetches none; a
document declaring a DTD (an entity bomb, an external entity) is refused without expanding
anything. Sitemap documents "succeed" here by storing a body and marking the job, as the writer
would; tests/crawls/test_crawls_e2e.py fetches them from a local target with real workers."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.utils import timezone

from apps.crawls import expansion
from apps.crawls.models import Crawl, CrawlPage
from apps.crawls.sitemaps import SitemapRefused, sitemap_read
from apps.jobs.models import Job
from apps.politeness.keys import robots_keys
from apps.politeness.robots import robots_local_cache_clear
from apps.redis_clients import state_redis
from apps.results.storage import result_store

ROOT = Path(__file__).resolve().parents[2]
ORIGIN = "http://127.0.0.1:9"
START = f"{ORIGIN}/site/0"
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def _lol(i: int) -> str:
    """An entity of ten of the one before: lol9 expands to 10^9 "lol"s."""
    ref = f"&lol{i - 1};"
    return f'<!ENTITY lol{i} "{ref * 10}">'


BOMB = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol0 "lol">'
    + "".join(_lol(i) for i in range(1, 10))
    + f"]><urlset {NS}><url><loc>http://127.0.0.1:9/&lol9;</loc></url></urlset>"
)
XXE = (
    '<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    f"<urlset {NS}><url><loc>http://127.0.0.1:9/&x;</loc></url></urlset>"
)


@pytest.fixture(autouse=True)
def _results_here(local_results):
    return local_results


def urlset(urls: list[str]) -> str:
    return (
        f'<?xml version="1.0"?><urlset {NS}>'
        + "".join(f"<url><loc>{u}</loc></url>" for u in urls)
        + "</urlset>"
    )


def index(urls: list[str]) -> str:
    return (
        f"<sitemapindex {NS}>"
        + "".join(f"<sitemap><loc>{u}</loc></sitemap>" for u in urls)
        + "</sitemapindex>"
    )


def _crawl(api, **body) -> uuid.UUID:
    r = api.post("/api/v1/crawls", {"seeds": [START], **body}, format="json")
    assert r.status_code == 202, r.content
    return uuid.UUID(r.json()["id"])


def _succeed(crawl_id: uuid.UUID, url: str, body: bytes | str, content_type: str = "text/html") -> None:
    job = Job.objects.get(batch_id=crawl_id, url=url)
    raw = body.encode() if isinstance(body, str) else body
    stored = result_store(job_id=job.id, attempt=1, chunks=[raw], content_type=content_type)
    Job.objects.filter(id=job.id).update(
        status="succeeded",
        attempts=1,
        result_key=stored.key,
        result_content_type=content_type,
        result_http_status=200,
        finished_at=timezone.now(),
    )


def _pages(crawl_id: uuid.UUID) -> list[tuple[str, str, int]]:
    return list(
        CrawlPage.objects.filter(crawl_id=crawl_id).order_by("seq").values_list("kind", "url_key", "depth")
    )


def test_a_sitemap_and_an_index_are_read_streaming_and_a_gzipped_one_is_inflated():
    doc = urlset([f"http://h.example/{i}" for i in range(3)]).encode()
    assert sitemap_read([doc[i : i + 5] for i in range(0, len(doc), 5)]).pages == [
        "http://h.example/0",
        "http://h.example/1",
        "http://h.example/2",
    ]
    zipped = gzip.compress(doc)
    assert (
        sitemap_read([zipped[i : i + 7] for i in range(0, len(zipped), 7)]).pages[2] == "http://h.example/2"
    )
    found = sitemap_read([index(["http://h.example/a.xml.gz"]).encode()])
    assert (found.pages, found.sitemaps) == ([], ["http://h.example/a.xml.gz"])


def test_the_protocols_limits_hold_50000_urls_and_50_mb_uncompressed():
    many = urlset([f"http://h.example/{i}" for i in range(50_010)]).encode()
    found = sitemap_read([many[i : i + 65536] for i in range(0, len(many), 65536)])
    assert len(found.pages) == 50_000 and found.truncated
    # A small gzip file that inflates past the bound: refused as it is inflated, not after.
    filler = gzip.compress(f"<urlset {NS}>".encode() + b"<url><lastmod>2026-01-01</lastmod></url>" * 40_000)
    with pytest.raises(SitemapRefused):
        sitemap_read([filler], max_bytes=1024 * 1024)


def test_an_entity_bomb_and_an_external_entity_are_refused():
    for hostile in (BOMB, XXE):
        with pytest.raises(SitemapRefused):
            sitemap_read([hostile.encode()])


def _probe(path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.sitemap_probe", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.e2e  # a fresh interpreter reads it (its peak memory): the whole suite's, not the fast loop's
def test_a_billion_laughs_sitemap_is_refused_without_memory_growth(tmp_path):
    # Expanded, lol9 would be 10^9 "lol"s: 3 GB. Refused, the reader grows by a few MB at most.
    path = tmp_path / "bomb.xml"
    path.write_text(BOMB)
    seen = _probe(path)
    assert seen["outcome"] == "SitemapRefused" and seen["pages"] == 0, seen
    assert seen["grown_mb"] < 32, seen
    # 20 MB of entries, gzipped to a small file: read one entry at a time, never held whole.
    big = tmp_path / "big.xml.gz"
    with gzip.open(big, "wb") as out:
        out.write(f"<urlset {NS}>".encode())
        for _ in range(500):
            out.write(b"<url><lastmod>2026-01-01</lastmod></url>" * 1000)
        out.write(b"</urlset>")
    seen = _probe(big)
    assert seen["outcome"] == "read" and seen["grown_mb"] < 16, seen


@pytest.mark.django_db
def test_include_takes_sitemap_xml_an_index_and_its_gzipped_sitemap_outside_max_pages(api):
    crawl_id = _crawl(api, max_pages=3, max_depth=1)
    _succeed(crawl_id, START, '<a href="/linked">x</a>')
    expansion.crawl_expand(crawl_id)
    # The seed's origin's /sitemap.xml is a document of the crawl: not one of its pages.
    assert _pages(crawl_id) == [
        ("page", START, 0),
        ("page", f"{ORIGIN}/linked", 1),
        ("sitemap", f"{ORIGIN}/sitemap.xml", 0),
    ]
    _succeed(crawl_id, f"{ORIGIN}/sitemap.xml", index(["/s1.xml.gz"]), "application/xml")
    expansion.crawl_expand(crawl_id)
    assert _pages(crawl_id)[-1] == ("sitemap", f"{ORIGIN}/s1.xml.gz", 1)
    gz = gzip.compress(
        urlset([f"{ORIGIN}/from-sitemap/{i}" for i in range(3)] + ["http://elsewhere.example/"]).encode()
    )
    _succeed(crawl_id, f"{ORIGIN}/s1.xml.gz", gz, "application/gzip")
    expansion.crawl_expand(crawl_id)
    pages = _pages(crawl_id)
    assert pages[-1] == ("page", f"{ORIGIN}/from-sitemap/0", 1)  # max_pages 3: one more page fits
    state = api.get(f"/api/v1/crawls/{crawl_id}").json()
    assert state["pages"]["total"] == 3 and state["pages"]["queued"] == 2  # sitemap jobs apart
    assert state["discovery"]["sitemaps"] == 2
    assert state["discovery"]["over_limit"] == 2 and state["discovery"]["out_of_scope"] == 1
    listed = api.get(f"/api/v1/crawls/{crawl_id}/pages").json()["items"]
    assert [p["kind"] for p in listed] == ["page", "page", "sitemap", "sitemap", "page"]


@pytest.mark.django_db
def test_robots_txt_sitemap_lines_as_cached_are_the_crawls_sitemaps(api):
    robots_local_cache_clear()
    text = f"User-agent: *\nDisallow: /nope\nSitemap: {ORIGIN}/maps/a.xml\nsitemap: /relative.xml\n"
    state_redis().set(robots_keys(f"{ORIGIN}")[0], f"ok\n{text}", px=60_000)
    try:
        crawl_id = _crawl(api, max_pages=10, max_depth=1)
        _succeed(crawl_id, START, "<p>no links</p>")
        expansion.crawl_expand(crawl_id)
    finally:
        state_redis().delete(robots_keys(f"{ORIGIN}")[0])
        robots_local_cache_clear()
    assert [url for kind, url, _ in _pages(crawl_id) if kind == "sitemap"] == [
        f"{ORIGIN}/maps/a.xml",
        f"{ORIGIN}/relative.xml",
        f"{ORIGIN}/sitemap.xml",
    ]


@pytest.mark.django_db
def test_only_takes_the_sitemaps_urls_and_follows_no_link(api):
    crawl_id = _crawl(api, max_pages=10, max_depth=5, sitemaps="only")
    _succeed(crawl_id, START, '<a href="/linked">x</a>')
    expansion.crawl_expand(crawl_id)
    _succeed(crawl_id, f"{ORIGIN}/sitemap.xml", urlset([f"{ORIGIN}/a", f"{ORIGIN}/b"]), "text/xml")
    expansion.crawl_expand(crawl_id)
    _succeed(crawl_id, f"{ORIGIN}/a", '<a href="/from-a">x</a>')
    _succeed(crawl_id, f"{ORIGIN}/b", "")
    expansion.crawl_expand(crawl_id)
    assert [(kind, url) for kind, url, _ in _pages(crawl_id)] == [
        ("page", START),
        ("sitemap", f"{ORIGIN}/sitemap.xml"),
        ("page", f"{ORIGIN}/a"),
        ("page", f"{ORIGIN}/b"),
    ]
    crawl = Crawl.objects.get(id=crawl_id)
    assert (crawl.status, crawl.pages, crawl.sitemap_documents) == ("completed", 3, 1)


@pytest.mark.django_db
def test_skip_fetches_no_sitemap_and_the_setting_bounds_how_many_are_taken(api, settings):
    crawl_id = _crawl(api, max_pages=10, sitemaps="skip")
    _succeed(crawl_id, START, "<p></p>")
    expansion.crawl_expand(crawl_id)
    assert [kind for kind, _, _ in _pages(crawl_id)] == ["page"]
    assert Crawl.objects.get(id=crawl_id).status == "completed"
    settings.SCRAPEJOBS_CRAWL_MAX_SITEMAPS = 2
    bounded = _crawl(api, max_pages=10)
    _succeed(bounded, START, "<p></p>")
    expansion.crawl_expand(bounded)
    _succeed(bounded, f"{ORIGIN}/sitemap.xml", index([f"/s{i}.xml" for i in range(5)]), "application/xml")
    expansion.crawl_expand(bounded)
    assert [url for kind, url, _ in _pages(bounded) if kind == "sitemap"] == [
        f"{ORIGIN}/sitemap.xml",
        f"{ORIGIN}/s0.xml",
    ]


@pytest.mark.django_db
def test_a_hostile_sitemap_of_a_crawl_gives_no_page_and_the_crawl_ends(api):
    crawl_id = _crawl(api, max_pages=10)
    _succeed(crawl_id, START, "<p></p>")
    expansion.crawl_expand(crawl_id)
    _succeed(crawl_id, f"{ORIGIN}/sitemap.xml", BOMB, "application/xml")
    expansion.crawl_expand(crawl_id)
    crawl = Crawl.objects.get(id=crawl_id)
    assert (crawl.status, crawl.pages, crawl.discovered) == ("completed", 1, 0)
