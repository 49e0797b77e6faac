"""Discovery (FR-40, docs/crawls.md): links read from a page's stored HTML, normalised and judged
by scope, patterns and depth; each page once per crawl; never more than max_pages pages, however
many expanders race in the database. Pages "succeed" here by storing a body and marking the job,
as the writer would; tests/crawls/test_crawls_e2e.py does it with real workers."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest
from django.db import connection, transaction
from django.utils import timezone

from apps.crawls import expansion, pages
from apps.crawls.links import Scope, links_of, links_read, robots_header_nofollow
from apps.crawls.models import Crawl, CrawlPage
from apps.jobs.models import Job
from apps.results.storage import result_read_chunks, result_store
from apps.tenants.models import Tenant

START = "http://127.0.0.1:9/site/0"


@pytest.fixture(autouse=True)
def _results_here(local_results):
    """Every test's results on the local filesystem (tests/conftest.py's ``local_results``)."""
    return local_results


def test_links_are_resolved_normalised_deduplicated_and_http_only():
    html = f"""<html><head><base href="/dir/"></head><body>
      <a href="a">a</a> <a href="a#frag">same</a> <A HREF="HTTP://127.0.0.1:80/dir/a">same again</A>
      <area href="/map"> <a href="mailto:x@y.example">mail</a> <a href="javascript:void(0)">js</a>
      <a href="https://Other.Example:443/Path?q=1#x">other</a> <a>no href</a>
      <a href="http://{"a" * 64}.example/">label too long</a> <a href="http://[::1">broken</a>
    </body></html>"""
    assert links_of(html, page_url="http://127.0.0.1/start") == [
        "http://127.0.0.1/dir/a",
        "http://127.0.0.1/map",
        "https://other.example/Path?q=1",
    ]


def test_same_origin_keeps_a_seeds_origin_and_same_site_its_registrable_domain():
    host = Scope.of(seeds=["http://a.shop.co.uk/"], kind="same_origin", include=[], exclude=[])
    assert host.in_scope("http://a.shop.co.uk/x")
    assert not host.in_scope("https://a.shop.co.uk/x")
    assert not host.in_scope("http://a.shop.co.uk:8080/x")
    assert not host.in_scope("http://b.shop.co.uk/x")
    domain = Scope.of(seeds=["http://a.shop.co.uk/"], kind="same_site", include=[], exclude=[])
    assert domain.in_scope("https://b.shop.co.uk/x") and domain.in_scope("http://shop.co.uk/")
    assert not domain.in_scope("http://other.co.uk/")  # co.uk is a public suffix, not a site
    # Several seeds: a link in the scope of any one of them is in scope.
    two = Scope.of(
        seeds=["http://a.example/", "https://b.example:8443/x"], kind="same_origin", include=[], exclude=[]
    )
    assert two.in_scope("http://a.example/p") and two.in_scope("https://b.example:8443/q")
    assert not two.in_scope("https://b.example/q")


def test_prefix_scope_keeps_a_seeds_origin_under_its_directory():
    scope = Scope.of(
        seeds=["http://h.example/docs/intro", "http://h.example/blog/"], kind="prefix", include=[], exclude=[]
    )
    assert scope.in_scope("http://h.example/docs/intro") and scope.in_scope("http://h.example/docs/a/b")
    assert scope.in_scope("http://h.example/blog/2026/post")
    assert not scope.in_scope("http://h.example/docsx/a")  # the directory, not a string prefix
    assert not scope.in_scope("http://h.example/")
    assert not scope.in_scope("https://h.example/docs/a")  # another origin
    assert not scope.in_scope("http://other.example/docs/a")


def test_include_and_exclude_are_path_patterns():
    scope = Scope.of(
        seeds=["http://h.example/"],
        kind="same_origin",
        include=["/docs/", "/*.html$"],
        exclude=["/docs/private*"],
    )
    assert scope.in_scope("http://h.example/docs/a")
    assert scope.in_scope("http://h.example/x/page.html")
    assert not scope.in_scope("http://h.example/x/page.html?v=1")  # $ ends the path and query
    assert not scope.in_scope("http://h.example/docs/private/1")
    assert not scope.in_scope("http://h.example/blog/")


def _crawl(api, url: str = START, **body) -> uuid.UUID:
    # No sitemap unless a test asks: the tests below count the pages links make.
    r = api.post("/api/v1/crawls", {"seeds": [url], "sitemaps": "skip", **body}, format="json")
    assert r.status_code == 202, r.content
    return uuid.UUID(r.json()["id"])


def _succeed(
    job: Job,
    html: str,
    *,
    content_type: str = "text/html; charset=utf-8",
    headers: dict[str, str] | None = None,
    final_url: str | None = None,
) -> None:
    stored = result_store(job_id=job.id, attempt=1, chunks=[html.encode()], content_type=content_type)
    Job.objects.filter(id=job.id).update(
        status="succeeded",
        attempts=1,
        result_key=stored.key,
        result_content_type=content_type,
        result_http_status=200,
        result_final_url=final_url or job.url,
        result_headers=headers,
        finished_at=timezone.now(),
    )


def _page(href_list: list[str]) -> str:
    return "".join(f'<a href="{h}">x</a>' for h in href_list)


def _job(crawl_id: uuid.UUID, url: str) -> Job:
    return Job.objects.get(batch_id=crawl_id, url=url)


@pytest.mark.django_db
def test_an_expansion_takes_new_in_scope_links_one_depth_down_and_counts_the_rest(api):
    crawl_id = _crawl(api, max_pages=4, max_depth=1, exclude=["/private*"])
    _succeed(
        _job(crawl_id, START),
        _page(["/a", "/b", "/a#x", "/site/0", "/private/1", "http://elsewhere.example/", "/c", "/d"]),
    )
    assert expansion.crawl_expand(crawl_id) == 1
    crawl = Crawl.objects.get(id=crawl_id)
    pages = list(
        CrawlPage.objects.filter(crawl_id=crawl_id)
        .order_by("seq")
        .values_list("url_key", "depth", "found_on")
    )
    assert pages == [
        ("http://127.0.0.1:9/site/0", 0, None),
        ("http://127.0.0.1:9/a", 1, 1),
        ("http://127.0.0.1:9/b", 1, 1),
        ("http://127.0.0.1:9/c", 1, 1),
    ]
    # 7 distinct links: /site/0 is a duplicate, /private/1 and elsewhere out of scope, /d over the limit.
    assert (crawl.pages, crawl.discovered, crawl.skipped_duplicate, crawl.skipped_out_of_scope) == (
        4,
        7,
        1,
        2,
    )
    assert crawl.skipped_over_limit == 1
    assert sorted(Job.objects.filter(batch_id=crawl_id).values_list("batch_row", flat=True)) == [1, 2, 3, 4]
    assert crawl.status == "running"
    # Depth 1 is max_depth: those pages' bodies are not read; once they end, the crawl ends.
    for url in ("http://127.0.0.1:9/a", "http://127.0.0.1:9/b"):
        _succeed(_job(crawl_id, url), _page(["/e", "/f"]))
    Job.objects.filter(batch_id=crawl_id, url="http://127.0.0.1:9/c").update(status="failed")
    expansion.crawl_expand(crawl_id)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.pages, crawl.discovered) == ("completed", 4, 7)
    assert crawl.finished_at is not None
    assert not CrawlPage.objects.filter(crawl_id=crawl_id, expanded_at__isnull=True).exists()


@pytest.mark.django_db
def test_a_page_that_is_not_html_is_not_read_and_a_crawl_of_failures_completes(api):
    crawl_id = _crawl(api, max_pages=10)
    _succeed(_job(crawl_id, START), _page(["/a"]), content_type="application/json")
    expansion.crawl_expand(crawl_id)
    crawl = Crawl.objects.get(id=crawl_id)
    assert (crawl.status, crawl.pages, crawl.discovered) == ("completed", 1, 0)
    failing = _crawl(api, max_pages=10)
    Job.objects.filter(batch_id=failing).update(status="failed")
    expansion.crawl_expand(failing)
    assert Crawl.objects.get(id=failing).status == "completed"
    assert api.get(f"/api/v1/crawls/{failing}").json()["pages"]["failed"] == 1


def _race(workers: int, fn: Callable[[int], object]) -> list[BaseException]:
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            fn(i)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(3))
def test_racing_expanders_never_take_more_than_max_pages(api, round_):
    crawl_id = _crawl(api, max_pages=25)

    def take(i: int) -> None:
        # Each expander brings 40 links, half of them shared with the next one.
        links = [f"http://127.0.0.1:9/p/{n}" for n in range(i * 20, i * 20 + 40)]
        with transaction.atomic():
            pages.pages_take(crawl_id, [pages.Candidate(url=u, depth=1, found_on=1) for u in links])

    assert _race(8, take) == []
    crawl = Crawl.objects.get(id=crawl_id)
    assert crawl.pages == 25
    assert Job.objects.filter(batch_id=crawl_id).count() == 25
    assert sorted(CrawlPage.objects.filter(crawl_id=crawl_id).values_list("seq", flat=True)) == list(
        range(1, 26)
    )
    assert CrawlPage.objects.filter(crawl_id=crawl_id).values("url_key").distinct().count() == 25


@pytest.mark.django_db(transaction=True)
def test_racing_expansions_of_one_crawl_read_each_page_once_and_stay_within_the_limit(api):
    crawl_id = _crawl(api, max_pages=30, max_depth=5)
    # The start page links to 10 pages, each of which links to 10 more (some shared).
    _succeed(_job(crawl_id, START), _page([f"/l1/{n}" for n in range(10)]))
    expansion.crawl_expand(crawl_id)
    for job in Job.objects.filter(batch_id=crawl_id).exclude(url=START):
        n = int(job.url.rsplit("/", 1)[1])
        _succeed(job, _page([f"/l2/{m}" for m in range(n * 5, n * 5 + 10)]))
    assert _race(6, lambda i: expansion.crawl_expand(crawl_id)) == []
    crawl = Crawl.objects.get(id=crawl_id)
    assert crawl.pages == 30 and Job.objects.filter(batch_id=crawl_id).count() == 30
    # Every page read once: 10 links from the start page, 10 from each of the 10 others.
    assert crawl.discovered == 10 + 10 * 10
    assert crawl.pages - 1 + crawl.skipped_duplicate + crawl.skipped_over_limit == crawl.discovered


@pytest.mark.django_db
def test_at_the_tenants_backlog_cap_a_crawl_is_refused_or_its_expansion_pauses(make_tenant):
    tenant, _, api = make_tenant()
    Tenant.objects.filter(id=tenant.id).update(max_queued_jobs=3)
    crawl_id = _crawl(api, max_pages=50)
    _crawl(api, url="http://127.0.0.1:9/other", max_pages=50)  # 2 queued of 3
    _succeed(_job(crawl_id, START), _page([f"/a/{n}" for n in range(4)]))
    # 1 queued now; 4 new pages do not fit in the 2 left: the page waits, unread, the crawl runs.
    assert expansion.crawl_expand(crawl_id) == 0
    crawl = Crawl.objects.get(id=crawl_id)
    assert (crawl.status, crawl.pages, crawl.discovered) == ("running", 1, 0)
    assert CrawlPage.objects.get(crawl_id=crawl_id).expanded_at is None
    answers = [
        api.post("/api/v1/crawls", {"seeds": [f"{START}?{n}"], "max_pages": 5}, format="json")
        for n in (3, 4, 5)
    ]
    assert [r.status_code for r in answers] == [202, 202, 429]  # 1 queued + 2 fit, then the cap
    assert answers[2].json()["code"] == "tenant_backlog_full" and answers[2]["Retry-After"]
    assert Crawl.objects.filter(tenant_id=tenant.id).count() == 4
    # With no job queued, a page with more new links than the whole cap still goes (no deadlock).
    Job.objects.filter(tenant_id=tenant.id, status="queued").update(status="cancelled")
    assert expansion.crawl_expand(crawl_id) == 1
    assert Crawl.objects.get(id=crawl_id).pages == 5


@pytest.mark.django_db
def test_a_body_the_storage_cannot_give_now_is_read_later_and_one_that_is_gone_has_no_links(api, monkeypatch):
    crawl_id = _crawl(api, max_pages=10)
    _succeed(_job(crawl_id, START), _page(["/a"]))

    def failing(**_):
        raise RuntimeError("storage down")

    monkeypatch.setattr(expansion, "result_read_chunks", failing)
    assert expansion.crawls_expand() == 0
    assert CrawlPage.objects.get(crawl_id=crawl_id).expanded_at is None  # left for the next time
    monkeypatch.undo()
    assert expansion.crawl_expand(crawl_id) == 1
    assert Crawl.objects.get(id=crawl_id).pages == 2
    gone = _crawl(api, url="http://127.0.0.1:9/gone", max_pages=10)
    Job.objects.filter(batch_id=gone).update(
        status="succeeded", result_key="nowhere/at/all", result_content_type="text/html"
    )
    assert expansion.crawl_expand(gone) == 1
    assert Crawl.objects.get(id=gone).status == "completed"


def test_links_are_read_by_a_streaming_parser_fed_chunks_that_split_tags_and_characters():
    html = '<html><head><base href="/d\u00e9p/"></head><body><a href="x">\u00e9</a><area href="/y"></body>'
    body = html.encode("utf-8")
    # One byte at a time: tags, attribute values and a two-byte character are all split.
    found = links_read(
        (body[i : i + 1] for i in range(len(body))), page_url="http://h.example/", charset="utf-8"
    )
    assert found.links == ["http://h.example/d\u00e9p/x", "http://h.example/y"]
    # An unknown charset falls back to the parser's own sniffing; an empty body has no links.
    assert (
        links_read([body], page_url="http://h.example/", charset="x-nonsense").links[1]
        == "http://h.example/y"
    )
    assert links_read([], page_url="http://h.example/").links == []


def test_nofollow_on_a_link_or_on_the_page_is_not_followed_and_is_counted():
    page = '<a href="/a">a</a> <a rel="external NoFollow" href="/b">b</a> <a rel="nofollow" href="/a">a</a>'
    found = links_read([page.encode()], page_url="http://h.example/")
    # /a is also linked without nofollow: followed, and not counted as nofollow.
    assert (found.links, found.nofollow) == (["http://h.example/a"], 1)
    for meta in (
        '<meta name="robots" content="noindex, NOFOLLOW">',
        '<meta name="ROBOTS" content="none">',
        '<meta name="scrapejobs" content="nofollow">',
    ):
        found = links_read([(meta + page).encode()], page_url="http://h.example/")
        assert (found.links, found.nofollow) == ([], 2), meta
    other = links_read(
        [('<meta name="otherbot" content="nofollow">' + page).encode()], page_url="http://h.example/"
    )
    assert other.links == ["http://h.example/a"]
    assert robots_header_nofollow("noindex, nofollow")
    assert robots_header_nofollow("None") and robots_header_nofollow("scrapejobs: nofollow")
    assert robots_header_nofollow("otherbot: noindex, scrapejobs: none")
    assert robots_header_nofollow("unavailable_after: 25 Jun 2010 15:00:00 PST, nofollow")
    assert not robots_header_nofollow("otherbot: nofollow")
    assert not robots_header_nofollow("noindex") and not robots_header_nofollow(None)


@pytest.mark.django_db
def test_a_crawl_honours_nofollow_in_its_three_forms_and_counts_what_it_did_not_follow(api):
    crawl_id = _crawl(api, max_pages=20, max_depth=3)
    _succeed(
        _job(crawl_id, START),
        _page(["/meta", "/header", "/other-header"]) + '<a rel="nofollow" href="/not-followed">x</a>',
    )
    expansion.crawl_expand(crawl_id)
    _succeed(
        _job(crawl_id, "http://127.0.0.1:9/meta"),
        '<meta name="robots" content="nofollow">' + _page(["/m1", "/m2"]),
    )
    _succeed(
        _job(crawl_id, "http://127.0.0.1:9/header"),
        _page(["/h1"]),
        headers={"x-robots-tag": "noindex, nofollow"},
    )
    _succeed(
        _job(crawl_id, "http://127.0.0.1:9/other-header"),
        _page(["/o1"]),
        headers={"x-robots-tag": "otherbot: nofollow"},
    )
    expansion.crawl_expand(crawl_id)
    urls = set(CrawlPage.objects.filter(crawl_id=crawl_id).values_list("url_key", flat=True))
    assert urls == {START, *(f"http://127.0.0.1:9/{p}" for p in ("meta", "header", "other-header", "o1"))}
    discovery = api.get(f"/api/v1/crawls/{crawl_id}").json()["discovery"]
    assert discovery["nofollow"] == 1 + 2 + 1  # the link, the meta page's two, the header page's one
    assert discovery["discovered"] == 4 + 2 + 1 + 1


@pytest.mark.django_db
def test_one_page_under_three_spellings_is_one_page_and_base_href_resolves_links(api):
    crawl_id = _crawl(api, max_pages=20, max_depth=3)
    _succeed(
        _job(crawl_id, START),
        '<head><base href="http://127.0.0.1:9/b/"></head>'
        + _page(["/a", "HTTP://127.0.0.1:9/a#top", "../a", "c"]),
        final_url="http://127.0.0.1:9/site/0",
    )
    expansion.crawl_expand(crawl_id)
    pages = list(
        CrawlPage.objects.filter(crawl_id=crawl_id).order_by("seq").values_list("url_key", flat=True)
    )
    assert pages == [START, "http://127.0.0.1:9/a", "http://127.0.0.1:9/b/c"]
    assert Job.objects.filter(batch_id=crawl_id, url="http://127.0.0.1:9/a").count() == 1
    assert Crawl.objects.get(id=crawl_id).discovered == 2


@pytest.mark.django_db
def test_the_links_of_a_redirected_page_resolve_against_its_final_url(api):
    crawl_id = _crawl(api, max_pages=20, max_depth=3, scope="same_origin")
    _succeed(_job(crawl_id, START), _page(["x"]), final_url="http://127.0.0.1:9/moved/here")
    expansion.crawl_expand(crawl_id)
    assert CrawlPage.objects.filter(crawl_id=crawl_id, url_key="http://127.0.0.1:9/moved/x").exists()


@pytest.mark.django_db
def test_a_body_is_read_in_bounded_chunks_up_to_the_page_limit(api, settings):
    crawl_id = _crawl(api, max_pages=20)
    job = _job(crawl_id, START)
    settings.SCRAPEJOBS_CRAWL_PAGE_MAX_BYTES = 2048
    # The first link is within the first 2,048 bytes, the second past them: never read.
    _succeed(job, _page(["/early"]) + " " * 4096 + _page(["/late"]))
    key = Job.objects.get(id=job.id).result_key
    chunks = list(result_read_chunks(key=key, max_bytes=2048, chunk_size=500))
    assert [len(c) for c in chunks] == [500, 500, 500, 500, 48]
    expansion.crawl_expand(crawl_id)
    urls = set(CrawlPage.objects.filter(crawl_id=crawl_id).values_list("url_key", flat=True))
    assert urls == {START, "http://127.0.0.1:9/early"}


@pytest.mark.django_db
def test_a_page_redirected_out_of_the_scope_has_its_links_unread_and_is_counted(api):
    crawl_id = _crawl(api, max_pages=20, max_depth=3)
    _succeed(_job(crawl_id, START), _page(["/away", "/inside"]))
    expansion.crawl_expand(crawl_id)
    # /away ended on another host, /inside on another page of the same origin.
    _succeed(
        _job(crawl_id, "http://127.0.0.1:9/away"),
        _page(["http://127.0.0.1:9/a1", "http://127.0.0.1:9/a2"]),
        final_url="http://other.example/x",
    )
    _succeed(_job(crawl_id, "http://127.0.0.1:9/inside"), _page(["/i1"]), final_url="http://127.0.0.1:9/in/x")
    expansion.crawl_expand(crawl_id)
    urls = set(CrawlPage.objects.filter(crawl_id=crawl_id).values_list("url_key", flat=True))
    assert urls == {START, "http://127.0.0.1:9/away", "http://127.0.0.1:9/inside", "http://127.0.0.1:9/i1"}
    discovery = api.get(f"/api/v1/crawls/{crawl_id}").json()["discovery"]
    assert discovery["out_of_scope_redirect"] == 1
    assert discovery["discovered"] == 2 + 1  # the redirected page's links were never read
    # Its page is still a page of the crawl that succeeded (it was fetched), and the crawl ends.
    for url in ("http://127.0.0.1:9/i1",):
        _succeed(_job(crawl_id, url), _page([]))
    expansion.crawl_expand(crawl_id)
    state = api.get(f"/api/v1/crawls/{crawl_id}").json()
    assert (state["status"], state["pages"]["succeeded"]) == ("completed", 4)
