"""robots.txt caches bounded by bytes (docs/limits.md): what is parsed stops at 500 KiB of a
file and 512 KiB of rules, Redis keeps the compact parsed rules (never parsed again on a hit), and
a process's copies are an LRU bounded by SCRAPEJOBS_ROBOTS_LOCAL_CACHE_BYTES."""

from __future__ import annotations

import pytest
from django.db import connection

from apps.politeness import robots
from apps.politeness.keys import robots_keys
from apps.politeness.robots import (
    RobotsAnswer,
    robots_local_cache_clear,
    robots_rules_cached,
    robots_rules_get,
)
from apps.politeness.robots_rules import MAX_PARSE_BYTES, MAX_RULES_BYTES, robots_parse
from apps.redis_clients import state_redis
from tests.support.procs import wait_for
from tests.support.threads import run_together


@pytest.fixture(autouse=True)
def _fresh_local_cache():
    robots_local_cache_clear()
    yield
    robots_local_cache_clear()


def _get(origin: str, text: str):
    host = origin.split("//")[1].rsplit(":", 1)[0]
    return robots_rules_get(
        origin=origin, host=host, fetch=lambda: RobotsAnswer(status=200, text=text), wait_s=5
    )


def test_rules_past_500_kib_of_the_file_are_dropped() -> None:
    filler = "# " + "c" * 998 + "\n"
    text = (
        "User-agent: *\nDisallow: /early\n"
        + filler * (MAX_PARSE_BYTES // len(filler) + 1)
        + "Disallow: /late\n"
    )
    rules = robots_parse(text, product="scrapejobs")
    assert not rules.allows("/early/x")
    assert rules.allows("/late/x")  # past the first 500 KiB: never read


def test_a_file_of_0xff_octets_is_kept_in_redis_as_its_compact_parsed_rules_capped(db) -> None:
    # 512 KiB of U+FFFD (what undecodable 0xFF octets become) in one disallow: 1.5 MiB as text,
    # 4.5 MiB percent-encoded. It once was stored whole, and parsed again at every Redis hit.
    text = "User-agent: *\nDisallow: /ok\nDisallow: /" + "\ufffd" * (MAX_PARSE_BYTES // 3) + "\n"
    rules = _get("http://ff.example:80", text)
    assert not rules.allows("/ok/x")
    stored = str(state_redis().get(robots_keys("http://ff.example:80")[0]))
    kind, _, compact = stored.partition("\n")
    assert kind == "r1"
    assert len(stored.encode()) < MAX_RULES_BYTES + 1024
    assert rules.size_bytes() < MAX_RULES_BYTES + 4096


def test_a_redis_hit_is_read_back_without_parsing_the_file_again(db, monkeypatch) -> None:
    text = (
        "User-agent: *\nDisallow: /private\nAllow: /private/open\nCrawl-delay: 2\n"
        "Sitemap: http://parsed.example/sitemap_index.xml\n"
    )
    _get("http://parsed.example:80", text)
    robots_local_cache_clear()

    def refuse(*args, **kwargs):
        raise AssertionError("parsed again")

    monkeypatch.setattr(robots, "robots_parse", refuse)
    rules = _get("http://parsed.example:80", "never fetched")
    assert (rules.allows("/private/x"), rules.allows("/private/open/x"), rules.crawl_delay_s) == (
        False,
        True,
        2.0,
    )
    # apps/crawls/links.py's read of the cached rules gives the same answer.
    robots_local_cache_clear()
    cached = robots_rules_cached(origin="http://parsed.example:80")
    assert cached is not None and not cached.allows("/private/x")
    # The Sitemap: lines a crawl reads (FR-43) are kept in the compact form too.
    assert cached.sitemaps == rules.sitemaps == ("http://parsed.example/sitemap_index.xml",)


def test_the_process_cache_keeps_the_most_recently_used_rules_within_its_bytes(db, settings) -> None:
    settings.SCRAPEJOBS_ROBOTS_LOCAL_CACHE_BYTES = 64 << 10
    text = "User-agent: *\n" + "".join(f"Disallow: /{i}/{'p' * 200}\n" for i in range(40))  # ~16 KiB kept
    origins = [f"http://o{i}.example:80" for i in range(20)]
    for origin in origins:
        _get(origin, text)
        _get(origins[0], text)  # the first one stays in use
    local = robots._local
    assert local.size <= 64 << 10
    assert origins[0] in local
    assert origins[-1] in local
    assert origins[1] not in local  # least recently used: out
    assert 1 < len(local) < len(origins)
    # What fell out is still answered, from Redis.
    assert not _get(origins[1], "never fetched").allows("/3/" + "p" * 200)


@pytest.mark.django_db(transaction=True)  # the leader reads the origin's limits on its own connection
def test_threads_of_one_process_that_miss_an_origin_at_once_read_redis_once(monkeypatch) -> None:
    """A worker's whole pool starting on a new site: one thread asks Redis (and here fetches the
    file); the other 24 are handed its rules instead of each reading Redis every 50 ms until the
    copy is there (NFR-11)."""
    origin = "http://flight.example:80"
    reads: list[str] = []
    real_cached = robots._cached

    def cached(r: object, key: str) -> tuple[str | None, int]:
        reads.append(key)
        return real_cached(r, key)

    monkeypatch.setattr(robots, "_cached", cached)
    fetches: list[int] = []

    def fetch() -> RobotsAnswer:
        fetches.append(1)
        wait_for(
            lambda: robots._flights.followers(origin) == 24, timeout=30, interval=0.01, what="24 followers"
        )
        return RobotsAnswer(status=200, text="User-agent: *\nDisallow: /no\n")

    allowed: list[bool] = []

    def ask() -> None:
        try:
            rules = robots_rules_get(origin=origin, host="flight.example", fetch=fetch, wait_s=5)
            allowed.append(rules.allows("/no"))
        finally:
            connection.close()

    run_together(ask, 25)
    assert (len(fetches), allowed) == (1, [False] * 25)
    assert len(reads) == 2  # the leader's miss, and its look again under the origin's lock


def test_a_worker_waiting_for_another_workers_fetch_looks_again_after_5_ms_then_twice_as_long(
    monkeypatch,
) -> None:
    """Another worker holds the origin's lock and is fetching: this one reads Redis again after 5,
    10, 20, 40, then every 50 ms, and takes that worker's copy as soon as it is there."""
    origin = "http://busy.example:80"
    key, lock = robots_keys(origin)
    r = state_redis()
    r.set(lock, "another-worker", px=30_000)
    pauses: list[float] = []

    def pause(s: float) -> None:
        pauses.append(s)
        if len(pauses) == 6:  # the other worker's copy lands, its lock goes
            r.set(
                key,
                robots._COMPACT
                + "\n"
                + robots._compact(robots_parse("User-agent: *\nDisallow: /x\n", product="scrapejobs")),
                px=60_000,
            )
            r.delete(lock)

    monkeypatch.setattr(robots, "_sleep", pause)
    try:
        rules = robots_rules_get(
            origin=origin, host="busy.example", fetch=lambda: pytest.fail("fetched a second time"), wait_s=5
        )
    finally:
        r.delete(key, lock)
    assert pauses == [0.005, 0.01, 0.02, 0.04, 0.05, 0.05]
    assert (rules.allows("/x"), rules.allows("/y")) == (False, True)
