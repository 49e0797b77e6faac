"""robots.txt (RFC 9309, FR-44): one cached copy of each origin's rules for every worker. The
rules themselves (parsing, matching) are apps/politeness/robots_rules.py's.

**Caching** (``robots_rules_get``): the rules that apply to us, in a compact form (``_compact``:
no comments, no other agents' groups, never parsed again), are kept in Redis per origin (scheme,
host, port) for ``SCRAPEJOBS_ROBOTS_TTL_S``, and in each process in an LRU bounded in bytes
(``SCRAPEJOBS_ROBOTS_LOCAL_CACHE_BYTES``). Both are bounded by what is parsed: the first
``MAX_PARSE_BYTES`` of a file (as Google's parser does) and ``MAX_RULES_BYTES`` of rules. One
worker fetches it while the others wait for its copy: whoever sets the origin's lock (``SET NX``
with an expiry, so a worker killed while fetching frees it) fetches; the rest poll the cache, one
thread per process (``_flights``: its other threads wait for that one's answer). So the target
sees one request per TTL whatever the number of workers. What an answer means (RFC
9309 2.3.1): 2xx, the rules; 4xx, allow everything; 5xx or no answer at all, disallow everything
for ``SCRAPEJOBS_ROBOTS_UNAVAILABLE_S`` (``RobotsUnavailable``: the job is retried later, not
failed).

The fetch itself is the caller's (``apps.scraping.fetch``, through the guarded fetcher): this
module only decides when it happens.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from apps.politeness.keys import robots_keys
from apps.politeness.limiter import domain_crawl_delay_set
from apps.politeness.robots_rules import (
    ALLOW_ALL,
    RULES_OVERHEAD_BYTES,
    RobotsRule,
    RobotsRules,
    product_token,
    robots_parse,
)
from apps.redis_clients import state_redis
from apps.runtime.single_flight import SingleFlight

logger = logging.getLogger(__name__)

# The RFC asks crawlers to parse at least 500 KiB; past this a file is read no further.
MAX_ROBOTS_BYTES = 512 * 1024
# How long one fetch of a robots.txt may take, and so how long others wait for its copy.
ROBOTS_FETCH_TIMEOUT_S = 10.0
# A worker remembers an origin's rules this long (or less: what is left of the Redis copy's TTL),
# so a job does not read a file of up to 512 KiB from Redis every time.
LOCAL_CACHE_S = 30.0
# A worker waiting for another's fetch reads Redis again after 5 ms, then twice as long each time,
# at most every 50 ms: a file that takes a few milliseconds to fetch is seen as soon as it lands,
# and a slow one costs a read per 50 ms of a single thread per process (``_flights``).
_POLL_FIRST_S = 0.005
_POLL_S = 0.05
_sleep = time.sleep  # the poll's pause (tests record it)

_ALLOW_ALL = "all"
_UNAVAILABLE = "none"
_RULES = "ok"  # the raw file (written by an older version): parsed when read
_COMPACT = "r1"  # the parsed rules (_compact)


@dataclass(frozen=True)
class RobotsAnswer:
    """What fetching ``/robots.txt`` gave: an HTTP status and the body, or ``status`` None when
    the host could not be reached (RFC 9309 2.3.1.4: a timeout, a refused connection, a DNS
    failure). The fetcher reports every failure this way; it raises only to stop (a cancel)."""

    status: int | None
    text: str = ""


class RobotsUnavailable(Exception):
    """The origin's robots.txt answered 5xx or could not be fetched: everything is disallowed
    for ``retry_after_s`` more seconds."""

    def __init__(self, origin: str, retry_after_s: float):
        super().__init__(f"robots.txt of {origin} unavailable; asked again in {retry_after_s:.0f} s")
        self.retry_after_s = retry_after_s


def robots_rules_get(
    *, origin: str, host: str, fetch: Callable[[], RobotsAnswer], wait_s: float
) -> RobotsRules:
    """The rules of ``origin`` for our user agent (``SCRAPEJOBS_FETCH_USER_AGENT``): from this worker's memory, from Redis, or
    fetched with ``fetch`` by exactly one worker for all (see the module docstring). Waits at most
    ``wait_s`` for another worker's fetch. Raises ``RobotsUnavailable`` while the file cannot be
    had (5xx, unreachable, or another worker's fetch outlasting ``wait_s``)."""
    now = time.monotonic()
    hit = _local.get(origin)
    if hit is not None and hit[0] > now:
        entry = hit[1]
    else:
        entry, ttl_s = _flights.run(
            origin,
            lambda: _shared_entry_get(origin=origin, host=host, fetch=fetch, wait_s=wait_s),
            wait_s=wait_s,
            timed_out=lambda: RobotsUnavailable(origin, 1.0),
        )
        _local.put(origin, (now + min(LOCAL_CACHE_S, ttl_s), entry))
    rules, unavailable_until = entry
    if rules is None:
        raise RobotsUnavailable(origin, max(1.0, unavailable_until - time.time()))
    return rules


def robots_rules_cached(*, origin: str) -> RobotsRules | None:
    """The rules of ``origin`` as the workers hold them now (this process's memory, else Redis),
    never fetched: None when no copy is held or the file is unavailable. A crawl refuses a link
    its origin's cached rules disallow before it becomes a job (docs/crawls.md)."""
    hit = _local.get(origin)
    if hit is not None and hit[0] > time.monotonic():
        return hit[1][0]
    raw, ttl_ms = _cached(state_redis(), robots_keys(origin)[0])
    if raw is None:
        return None
    entry = _entry(raw, ttl_ms / 1000.0)
    _local.put(origin, (time.monotonic() + min(LOCAL_CACHE_S, ttl_ms / 1000.0), entry))
    return entry[0]


# origin -> (monotonic expiry, (the rules or None while unavailable, wall-clock end of the copy))
_Entry = tuple[RobotsRules | None, float]


class _LocalRules:
    """This process's copies of origins' rules: least recently used first out once their sizes
    (``RobotsRules.size_bytes``) pass ``SCRAPEJOBS_ROBOTS_LOCAL_CACHE_BYTES``. It was 10,000
    files of any size: 500 origins of 1 MiB were half a GiB a worker."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, tuple[float, _Entry, int]] = OrderedDict()
        self._lock = threading.Lock()  # worker threads share it
        self.size = 0

    def get(self, origin: str) -> tuple[float, _Entry] | None:
        with self._lock:
            item = self._items.get(origin)
            if item is None:
                return None
            self._items.move_to_end(origin)
            return item[0], item[1]

    def put(self, origin: str, value: tuple[float, _Entry]) -> None:
        rules = value[1][0]
        size = len(origin) + (rules.size_bytes() if rules is not None else RULES_OVERHEAD_BYTES)
        limit = settings.SCRAPEJOBS_ROBOTS_LOCAL_CACHE_BYTES
        with self._lock:
            old = self._items.pop(origin, None)
            if old is not None:
                self.size -= old[2]
            if size > limit:
                return  # larger than the whole cache: read from Redis each time
            self._items[origin] = (value[0], value[1], size)
            self.size += size
            while self.size > limit:
                _, (_, _, dropped) = self._items.popitem(last=False)
                self.size -= dropped

    def __contains__(self, origin: str) -> bool:
        return origin in self._items

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.size = 0


_local = _LocalRules()


def robots_local_cache_clear() -> None:
    _local.clear()


# The threads of this process that miss an origin's rules at once: the first asks Redis (and
# fetches the file, if it takes the origin's lock); the others wait for its answer rather than
# each reading Redis every ``_POLL_S`` (a worker's whole pool, each thread on its first job to a new
# site, woke up to 50 ms after the file was there). A follower that waits longer than its own
# ``wait_s`` is refused as a poll that ran out is.
_flights: SingleFlight[str, tuple[_Entry, float]] = SingleFlight()


def _shared_entry_get(
    *, origin: str, host: str, fetch: Callable[[], RobotsAnswer], wait_s: float
) -> tuple[_Entry, float]:
    """The origin's entry from Redis, fetching it under the lock when missing; and the seconds it
    has left."""
    r = state_redis()
    key, lock = robots_keys(origin)
    give_up = time.monotonic() + wait_s
    pause = _POLL_FIRST_S
    while True:
        raw, ttl_ms = _cached(r, key)
        if raw is not None:
            return _entry(raw, ttl_ms / 1000.0), ttl_ms / 1000.0
        token = secrets.token_hex(8)
        if r.set(lock, token, nx=True, px=int((ROBOTS_FETCH_TIMEOUT_S + 5) * 1000)):
            try:
                # Looked again under the lock: another worker may have stored its copy and let the
                # lock go between our miss and our taking it (two fetches 30 ms apart, seen).
                raw, ttl_ms = _cached(r, key)
                if raw is not None:
                    return _entry(raw, ttl_ms / 1000.0), ttl_ms / 1000.0
                raw, ttl_s = _fetched(origin=origin, host=host, fetch=fetch)
                r.set(key, raw, px=int(ttl_s * 1000))
            finally:
                if r.get(lock) == token:
                    r.delete(lock)
            return _entry(raw, ttl_s), ttl_s
        if time.monotonic() >= give_up:
            raise RobotsUnavailable(origin, 1.0)
        _sleep(pause)
        pause = min(pause * 2, _POLL_S)


def _cached(r: object, key: str) -> tuple[str | None, int]:
    pipe = r.pipeline(transaction=False)  # type: ignore[attr-defined]
    pipe.get(key)
    pipe.pttl(key)
    raw, ttl_ms = pipe.execute()
    return raw, max(int(ttl_ms), 0)


def _entry(raw: str, ttl_s: float) -> _Entry:
    kind, _, text = raw.partition("\n")
    if kind == _UNAVAILABLE:
        return None, time.time() + ttl_s
    if kind == _ALLOW_ALL:
        return ALLOW_ALL, 0.0
    if kind == _COMPACT:
        return _from_compact(text), 0.0
    return robots_parse(text, product=product_token(settings.SCRAPEJOBS_FETCH_USER_AGENT)), 0.0


def _compact(rules: RobotsRules) -> str:
    """The parsed rules as Redis keeps them: in the order they are tried, each as (allow, its
    length, anchored, its pieces); read back without parsing (``_from_compact``). At most about
    ``MAX_RULES_BYTES`` and a few bytes a rule (``SCRAPEJOBS_ROBOTS_MAX_RULES``)."""
    return json.dumps(
        {
            "d": rules.crawl_delay_s,
            "r": [[int(r.allow), r.length, int(r.anchored), *r.pieces] for r in rules.rules],
            "s": list(rules.sitemaps),  # a crawl's sitemaps (docs/crawls.md), at most MAX_SITEMAP_LINES
        },
        separators=(",", ":"),
    )


def _from_compact(text: str) -> RobotsRules:
    data = json.loads(text)
    return RobotsRules(
        rules=tuple(
            RobotsRule(length=length, allow=bool(allow), pieces=tuple(pieces), anchored=bool(anchored))
            for allow, length, anchored, *pieces in data["r"]
        ),
        crawl_delay_s=data["d"],
        sitemaps=tuple(data.get("s", ())),
    )


def _fetched(*, origin: str, host: str, fetch: Callable[[], RobotsAnswer]) -> tuple[str, float]:
    """Fetch the file and say what to cache, for how long; a Crawl-delay reaches the domain's
    rate here, once per fetch."""
    # Whatever ``fetch`` raises (the job was cancelled meanwhile) caches nothing: the lock is let
    # go and the next worker fetches.
    answer = fetch()
    if answer.status is None:
        logger.warning("robots.txt of %s could not be fetched", origin)
    ttl_s = float(settings.SCRAPEJOBS_ROBOTS_TTL_S)
    if answer.status is not None and 200 <= answer.status < 300:
        rules = robots_parse(answer.text, product=product_token(settings.SCRAPEJOBS_FETCH_USER_AGENT))
        domain_crawl_delay_set(domain=host, delay_s=rules.crawl_delay_s, ttl_s=ttl_s)
        return f"{_COMPACT}\n{_compact(rules)}", ttl_s
    if answer.status is not None and 400 <= answer.status < 500:
        domain_crawl_delay_set(domain=host, delay_s=None, ttl_s=ttl_s)
        return f"{_ALLOW_ALL}\n", ttl_s
    return f"{_UNAVAILABLE}\n", float(settings.SCRAPEJOBS_ROBOTS_UNAVAILABLE_S)
