"""One rendered page's share (docs/limits.md): at most MAX_SUBREQUESTS requests and PAGE_MAX_BYTES
of answers in all, however many of its fetch threads ask at once; every request a token of its
own site's bucket, or blocked unsent; Chromium's JS heap capped and
WebRTC kept from leaking the host's address. Through PageRequests (the answer to each of a
page's requests) against a real local target; Chromium is not needed."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from apps.politeness.models import DomainPolicy
from apps.politeness.selectors import domain_limits_cache_clear
from apps.scraping.browser import CHROMIUM_ARGS
from apps.scraping.browser_page import PAGE_FETCH_THREADS
from apps.scraping.fetched import FetchLimits
from apps.scraping.render import MAX_SUBREQUESTS, PAGE_MAX_BYTES, Document, PageRequests

pytestmark = pytest.mark.django_db


def _page(options: dict | None = None, max_bytes: int = 10 << 20) -> PageRequests:
    limits = FetchLimits.from_settings()
    return PageRequests(
        document=Document(url="http://page.example/", status=200, content_type="text/html", body=b"<html>"),
        options=options or {},
        deadline=time.monotonic() + 120,
        limits=FetchLimits(
            connect_timeout_s=limits.connect_timeout_s,
            max_bytes=max_bytes,
            max_redirects=limits.max_redirects,
            user_agent=limits.user_agent,
        ),
    )


def test_a_page_past_200_requests_is_refused_the_rest() -> None:
    page = _page({"block": ["images"]})
    answers = [
        page(f"http://img.example/{i}.png", "GET", {}, None, "image", False)
        for i in range(MAX_SUBREQUESTS + 5)
    ]
    assert MAX_SUBREQUESTS <= 200
    assert {a.reason for a in answers[:MAX_SUBREQUESTS]} == {"image blocked by the job"}
    assert {a.reason for a in answers[MAX_SUBREQUESTS:]} == {"too many requests"}


def test_a_pages_answers_stop_at_its_byte_budget_whatever_its_threads_ask_at_once(target) -> None:
    assert PAGE_MAX_BYTES == 32 << 20
    page = _page()
    size = 9 << 20  # four of them are past the page's 32 MiB
    with ThreadPoolExecutor(PAGE_FETCH_THREADS) as pool:
        answers = list(
            pool.map(
                lambda i: page(target.url(f"/bytes/{size}?n={i}"), "GET", {}, None, "script", False), range(8)
            )
        )
    fulfilled = [a for a in answers if a.action == "fulfill"]
    # Each declared 9 MiB is taken whole before it is read: three fit, the rest are refused unsent.
    assert len(fulfilled) == 3
    assert sum(len(a.body or b"") for a in fulfilled) <= PAGE_MAX_BYTES
    assert {a.action for a in answers} - {"fulfill"} <= {"fail", "block"}
    # Nothing reserved is kept: the budget is what the fulfilled answers left.
    assert page.bytes_left == PAGE_MAX_BYTES - sum(len(a.body or b"") for a in fulfilled)
    # Small answers still fit in what is left; once it is spent, requests are refused unsent.
    small = page(target.url("/bytes/1000"), "GET", {}, None, "script", False)
    assert small.action == "fulfill" and len(small.body or b"") == 1000
    page.bytes_left = 0
    spent = page(target.url("/bytes/10"), "GET", {}, None, "script", False)
    assert (spent.action, spent.reason) == ("block", "the page's 32 MiB of answers are spent")


def test_small_answers_asked_at_once_all_pass_however_large_the_per_answer_cap(target) -> None:
    """No answer is refused for bytes that others may read but have not: with a per-answer cap
    past the page's budget, the page's threads asking at once for small scripts all get them."""
    page = _page(max_bytes=PAGE_MAX_BYTES * 2)
    with ThreadPoolExecutor(PAGE_FETCH_THREADS) as pool:
        answers = list(
            pool.map(
                lambda i: page(target.url(f"/bytes/1000?n={i}"), "GET", {}, None, "script", False),
                range(PAGE_FETCH_THREADS * 2),
            )
        )
    assert [(a.action, len(a.body or b"")) for a in answers] == [("fulfill", 1000)] * (PAGE_FETCH_THREADS * 2)
    assert page.bytes_left == PAGE_MAX_BYTES - 1000 * PAGE_FETCH_THREADS * 2


def test_an_answer_of_unknown_length_is_counted_as_read_and_stopped_at_what_is_left(target) -> None:
    page = _page()
    page.bytes_left = 3 << 20
    past = page(target.url(f"/unsized/{4 << 20}"), "GET", {}, None, "script", False)
    assert (past.action, past.reason) == ("block", "the page's 32 MiB of answers are spent")
    assert page.bytes_left == 3 << 20  # what it read before the budget ran out is given back
    within = page(target.url(f"/unsized/{2 << 20}"), "GET", {}, None, "script", False)
    assert (within.action, len(within.body or b"")) == ("fulfill", 2 << 20)
    assert page.bytes_left == 1 << 20


def test_requests_to_another_site_take_that_sites_tokens_or_are_blocked_unsent(target) -> None:
    """A page on page.example asking 127.0.0.1 (another site: a CDN, say) for four scripts takes
    127.0.0.1's tokens, as its own assets take page.example's: the burst's two, then blocked."""
    DomainPolicy.objects.create(domain="127.0.0.1", requests_per_second=0.01, burst=2, max_concurrency=100)
    domain_limits_cache_clear()
    page = _page()
    answers = [page(target.url(f"/bytes/10?n={i}"), "GET", {}, None, "script", False) for i in range(4)]
    assert [a.action for a in answers] == ["fulfill", "fulfill", "block", "block"]
    assert {a.reason for a in answers[2:]} == {"no token of 127.0.0.1 now"}
    assert len(target.requests_for("/bytes/10")) == 2  # the blocked ones were never sent


def test_chromium_gets_a_bounded_js_heap_and_no_webrtc_udp_outside_the_proxy() -> None:
    assert "--js-flags=--max-old-space-size=256" in CHROMIUM_ARGS
    assert "--force-webrtc-ip-handling-policy=disable_non_proxied_udp" in CHROMIUM_ARGS
