"""The browser component's machinery in this process (apps/scraping/browser.py, render.py):
a Chromium reused and replaced after its share of pages (SCRAPEJOBS_BROWSER_PAGES_PER_BROWSER),
and a page's requests to its own domain taking a token or blocked, never waited on (NFR-32)."""

from __future__ import annotations

import os
import time

import pytest
from django.conf import settings

from apps.politeness.models import DomainPolicy
from apps.politeness.selectors import domain_limits_cache_clear
from apps.scraping.browser import BrowserPool
from apps.scraping.browser_page import RenderSpec
from apps.scraping.fetch import FetchRequest, fetch_open
from apps.scraping.fetched import FetchLimits
from apps.scraping.render import Document, PageRequests
from tests.rendering.pages import Page

CHROMIUM = "/usr/bin/chromium"
pytestmark = [
    pytest.mark.e2e,  # starts Chromium processes
    pytest.mark.skipif(
        not os.access(CHROMIUM, os.X_OK),
        reason=f"no {CHROMIUM}: `make test` installs Debian's chromium where it can (apt-get as root)",
    ),
]


@pytest.fixture
def pool():
    made = BrowserPool(
        executable=CHROMIUM, sandbox=settings.SCRAPEJOBS_BROWSER_SANDBOX, pages_per_browser=2, concurrency=2
    )
    yield made
    made.close()


def _render(pool: BrowserPool, url: str, options: dict | None = None):
    limits = FetchLimits.from_settings()
    with fetch_open(request=FetchRequest(method="GET", url=url, timeout_s=20)) as fetched:
        document = Document(fetched.url, fetched.status, fetched.content_type, b"".join(fetched.chunks()))
    deadline = time.monotonic() + 20
    answers = PageRequests(document=document, options=options or {}, deadline=deadline, limits=limits)
    spec = RenderSpec(
        url=url, options=options or {}, user_agent="scrapejobs-test", deadline=deadline, answer=answers
    )
    return pool.render(spec, check=lambda: None)


@pytest.mark.django_db(transaction=True)  # the page's fetch threads read the domain policy (egress proxy)
def test_one_chromium_serves_its_share_of_pages_then_a_fresh_one_takes_over(pool, site):
    url = site.html(
        "/count", "<p id=n></p><script>document.getElementById('n').textContent = 6 * 7;</script>"
    )
    rendered = [_render(pool, url) for _ in range(3)]
    assert all('<p id="n">42</p>' in r.html for r in rendered)
    assert pool.launches == 2  # pages 1 and 2 on the first Chromium, page 3 on a fresh one


@pytest.mark.django_db(transaction=True)  # the page's fetch threads read the policy
def test_requests_to_the_pages_own_domain_take_a_token_or_are_blocked_without_waiting(pool, site):
    DomainPolicy.objects.create(domain="127.0.0.1", requests_per_second=0.01, burst=2, max_concurrency=100)
    domain_limits_cache_clear()
    for name in ("a", "b", "c", "d"):
        site.pages[f"/{name}.js"] = Page(f"document.body.dataset.{name} = 'ran';".encode(), "text/javascript")
    url = site.html(
        "/assets",
        "<body><script src=/a.js></script><script src=/b.js></script>"
        "<script src=/c.js></script><script src=/d.js></script></body>",
    )
    started = time.monotonic()
    rendered = _render(pool, url)
    # time is the subject: a render within 15 s, where a wait for a token at 0.01/s would take 100 s
    assert time.monotonic() - started < 15
    # The burst's two tokens went to two scripts (the document's own permit is the worker's gate,
    # not taken here); the other two were blocked, not waited for.
    assert (rendered.made, rendered.blocked) == (4, 2)
    assert len([p for p in site.requested() if p.endswith(".js")]) == 2
    assert rendered.html.count('="ran"') == 2


@pytest.mark.django_db(transaction=True)  # the page's fetch threads read the domain policy (egress proxy)
def test_a_blocked_resource_type_is_not_fetched(pool, site):
    site.pages["/pic.png"] = Page(b"\x89PNG", "image/png")
    url = site.html("/img", "<body><img src=/pic.png><p>text</p></body>")
    rendered = _render(pool, url, {"block": ["images"]})
    assert (rendered.made, rendered.blocked) == (1, 1)
    assert site.requested("/pic.png") == []
