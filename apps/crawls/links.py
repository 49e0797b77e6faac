"""Finding a page's links and judging them (FR-40, docs/crawls.md).

Following links is not parsing: the service reads ``<a href>`` and ``<area href>`` (and
``<base href>``) to find more pages of a crawl, and nothing else of the page. Links are resolved
against the base and the page's final URL, their fragment dropped, and normalised with the same
rule as single-flight's fetch key (``normalised_url``), so one page under several spellings is one
page of the crawl. Only http(s) links are kept.

Scope and patterns: ``same_origin`` keeps links to a seed's scheme, host and port; ``same_site``
to any host of a seed's registrable domain (the public suffix list politeness uses,
apps/politeness/domains.py); ``prefix`` to a seed's origin under the seed's path up to its last
``/`` (``/docs/intro`` keeps ``/docs/…``). ``include`` / ``exclude`` are path patterns matched as robots.txt
rules are (``*`` any run, a final ``$`` the end; the linear matcher of apps/politeness/robots.py,
no regular expressions): a link is kept when it matches no ``exclude`` and, if any ``include`` is
given, at least one of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import SplitResult, urljoin, urlsplit

from apps.jobs.singleflight import normalised_url
from apps.politeness.domains import registrable_domain
from apps.politeness.robots import RobotsRule, RobotsRules, robots_rules_cached
from apps.politeness.selectors import domain_limits_get

MAX_PATTERNS = 20
MAX_PATTERN_LENGTH = 256
MAX_PATTERN_WILDCARDS = 10
# The most links read from one page: a page of a million links is read up to here.
MAX_LINKS_PER_PAGE = 5000
# What POST /jobs takes (apps/intake/serializers.py): a longer link is not followed.
MAX_URL_LENGTH = 8192
MAX_HOSTNAME = 253


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.base: str | None = None
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ("a", "area", "base"):
            return
        href = next((v for k, v in attrs if k == "href" and v), None)
        if href is None:
            return
        if tag == "base":
            if self.base is None:
                self.base = href.strip()
        elif len(self.hrefs) < MAX_LINKS_PER_PAGE:
            self.hrefs.append(href.strip())


def links_of(html: str, *, page_url: str) -> list[str]:
    """The page's links, resolved, without fragments, normalised, http(s) only, in page order,
    each once."""
    parser = _LinkParser()
    parser.feed(html)
    parser.close()
    base = urljoin(page_url, parser.base) if parser.base else page_url
    seen: dict[str, None] = {}
    for href in parser.hrefs:
        try:
            absolute = urljoin(base, href)
            parts = urlsplit(absolute)
            if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
                continue
            parts.port  # noqa: B018 - raises ValueError on a port that is not one
            if len(absolute) > MAX_URL_LENGTH or len(link_domain(absolute)) > MAX_HOSTNAME:
                continue
            seen.setdefault(normalised_url(absolute), None)
        except (ValueError, UnicodeError):  # not a URL, or a host that is not valid IDNA
            continue
    return list(seen)


def link_domain(url: str) -> str:
    """A page job's domain, as intake gives a job's: the lowercase hostname, IDNA-encoded."""
    host = urlsplit(url).hostname or ""
    return host.encode("idna").decode("ascii").lower()


def pattern_rule(pattern: str) -> RobotsRule:
    """A path pattern as the robots.txt matcher takes it (validated by the caller)."""
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    return RobotsRule(length=len(body), allow=True, pieces=tuple(body.split("*")), anchored=anchored)


def pattern_problem(pattern: object) -> str | None:
    """Why a pattern is refused, or None."""
    if not isinstance(pattern, str):
        return "A pattern is a string."
    if not 1 <= len(pattern) <= MAX_PATTERN_LENGTH:
        return f"A pattern is 1 to {MAX_PATTERN_LENGTH} characters."
    if not pattern.startswith("/") and not pattern.startswith("*"):
        return "A pattern is a URL path: it starts with / (or *)."
    if pattern.count("*") > MAX_PATTERN_WILDCARDS:
        return f"At most {MAX_PATTERN_WILDCARDS} * in a pattern."
    if "$" in pattern[:-1]:
        return "$ may only end a pattern."
    if any(c.isspace() or ord(c) < 0x20 for c in pattern):
        return "A pattern has no whitespace or control characters."
    return None


def _origin(parts: SplitResult) -> tuple[str, str | None, int | None]:
    return parts.scheme, parts.hostname, parts.port


def _path_prefix(path: str) -> str:
    """A seed's directory: its path up to and including its last ``/``."""
    return (path or "/")[: (path or "/").rfind("/") + 1]


@dataclass(frozen=True)
class Scope:
    """What a crawl keeps: built once per expansion from the crawl's row. A link is in scope when
    it is in the scope of any one seed."""

    kind: str  # CrawlScope: "same_origin", "same_site" or "prefix"
    origins: frozenset[tuple[str, str | None, int | None]]
    sites: frozenset[str]
    prefixes: tuple[tuple[tuple[str, str | None, int | None], str], ...]
    include: tuple[RobotsRule, ...]
    exclude: tuple[RobotsRule, ...]

    @classmethod
    def of(cls, *, seeds: Iterable[str], kind: str, include: Iterable[str], exclude: Iterable[str]) -> Scope:
        parts = [urlsplit(normalised_url(seed)) for seed in seeds]
        return cls(
            kind=kind,
            origins=frozenset(_origin(p) for p in parts),
            sites=frozenset(registrable_domain(p.hostname or "") for p in parts),
            prefixes=tuple((_origin(p), _path_prefix(p.path)) for p in parts),
            include=tuple(pattern_rule(p) for p in include),
            exclude=tuple(pattern_rule(p) for p in exclude),
        )

    def in_scope(self, url: str) -> bool:
        """``url`` normalised (``links_of``)."""
        parts = urlsplit(url)
        if self.kind == "same_origin":
            if _origin(parts) not in self.origins:
                return False
        elif self.kind == "same_site":
            if registrable_domain(parts.hostname or "") not in self.sites:
                return False
        else:
            origin, path = _origin(parts), parts.path or "/"
            if not any(origin == o and path.startswith(prefix) for o, prefix in self.prefixes):
                return False
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if any(rule.matches(path) for rule in self.exclude):
            return False
        return not self.include or any(rule.matches(path) for rule in self.include)


def _robots_origin(url: str) -> tuple[str, str]:
    """(``scheme://host:port``, host): the origin a robots.txt is about, spelt as the workers
    key its cached copy (apps/scraping/fetch.py)."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    bracketed = f"[{host}]" if ":" in host else host
    return f"{scheme}://{bracketed}:{parts.port or (443 if scheme == 'https' else 80)}", host


class RobotsJudge:
    """Whether a link is disallowed by its origin's robots.txt as the workers have it cached now
    (FR-40): such a link would end ``robots_disallowed`` without a fetch, so it is not made a job.
    No copy cached, the file unavailable, a policy that ignores robots.txt, or Redis unreachable:
    allowed here, and the page's job decides as every job does."""

    def __init__(self) -> None:
        self._rules: dict[str, RobotsRules | None] = {}

    def disallows(self, url: str) -> bool:
        origin, host = _robots_origin(url)
        if origin not in self._rules:
            try:
                obeyed = domain_limits_get(domain=host).obey_robots
                self._rules[origin] = robots_rules_cached(origin=origin) if obeyed else None
            except Exception:  # noqa: BLE001 - Redis or the policy lookup down: the job decides
                self._rules[origin] = None
        rules = self._rules[origin]
        if rules is None:
            return False
        parts = urlsplit(url)
        return not rules.allows((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
