"""robots.txt on every hop of a fetch (NFR-23): whether a hop's URL may be requested, by its
origin's rules as cached by ``apps.politeness.robots``; the file itself is read through the
guarded fetcher (apps/scraping/fetch.py, ``_robots_fetch``).
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import redis

from apps.politeness.robots import ROBOTS_FETCH_TIMEOUT_S, RobotsAnswer, RobotsUnavailable, robots_rules_get
from apps.politeness.selectors import domain_limits_get
from apps.scraping.errors import FetchError
from apps.scraping.fetched import time_left


def robots_check(url: str, *, host: str, deadline: float, fetch: Callable[[str], RobotsAnswer]) -> None:
    """Raise ``robots_disallowed`` when ``url``'s robots.txt forbids it (and the policy of its
    ``host`` obeys robots.txt), ``robots_unavailable`` while that file cannot be had.
    ``fetch(origin)`` reads the origin's file when its cached copy is not enough."""
    parts = urlsplit(url)
    if not domain_limits_get(domain=host).obey_robots:
        return
    origin = _robots_origin(parts.scheme.lower(), host, parts.port)
    try:
        rules = robots_rules_get(
            origin=origin,
            host=host,
            fetch=lambda: fetch(origin),
            wait_s=min(ROBOTS_FETCH_TIMEOUT_S, time_left(deadline)),
        )
    except RobotsUnavailable as e:
        raise FetchError("robots_unavailable", str(e), permanent=False, retry_after_s=e.retry_after_s) from e
    except redis.RedisError as e:
        raise FetchError("robots_unavailable", f"robots.txt cache unavailable: {e}", permanent=False) from e
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if not rules.allows(target):
        raise FetchError("robots_disallowed", f"robots.txt of {origin} disallows {target}", permanent=True)


def _robots_origin(scheme: str, host: str, port: int | None) -> str:
    """``scheme://host:port``, the origin a robots.txt is about (RFC 9309 2.3): its verdict, its
    cached copy and any pause it causes hold for this origin only, never for the host's other
    ports or schemes. An IPv6 literal is bracketed (RFC 3986 3.2.2): unbracketed, the file's URL
    could not be parsed, which read as "no robots.txt", allow everything."""
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or (443 if scheme == 'https' else 80)}"
