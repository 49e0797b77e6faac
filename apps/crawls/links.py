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
rules are (``*`` any run, a final ``$`` the end; the linear matcher of apps/politeness/robots_rules.py,
no regular expressions): a link is kept when it matches no ``exclude`` and, if any ``include`` is
given, at least one of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, urljoin, urlsplit

from lxml import etree

from apps.jobs.fetch_keys import normalised_url
from apps.politeness.domains import registrable_domain
from apps.politeness.robots import robots_rules_cached
from apps.politeness.robots_rules import RobotsRule, RobotsRules
from apps.politeness.selectors import domain_limits_get

MAX_PATTERNS = 20
MAX_PATTERN_LENGTH = 256
MAX_PATTERN_WILDCARDS = 10
# The most links read from one page: a page of a million links is read up to here.
MAX_LINKS_PER_PAGE = 5000
# What POST /jobs takes (apps/intake/serializers.py): a longer link is not followed.
MAX_URL_LENGTH = 8192
MAX_HOSTNAME = 253


@dataclass
class PageLinks:
    """What a page gives a crawl: its links (resolved, normalised, each once, in page order), and
    how many it names that are not followed because the page or the link says ``nofollow``."""

    links: list[str] = field(default_factory=list)
    nofollow: int = 0


class _LinkTarget:
    """lxml's parser target: sees each start tag as the parser streams through the page and keeps
    only ``<base href>``, ``<a href>``, ``<area href>`` (and their ``rel``) and ``<meta name=robots>``."""

    def __init__(self, product: str) -> None:
        self.meta_names = ("robots", product)
        self.base: str | None = None
        self.hrefs: list[str] = []
        self.nofollow_hrefs: list[str] = []
        self.nofollow_page = False

    def start(self, tag: str, attrib: Any) -> None:
        if tag in ("a", "area"):
            href = (attrib.get("href") or "").strip()
            if not href:
                return
            if len(self.hrefs) + len(self.nofollow_hrefs) >= MAX_LINKS_PER_PAGE:
                return
            if "nofollow" in (attrib.get("rel") or "").lower().split():
                self.nofollow_hrefs.append(href)
            else:
                self.hrefs.append(href)
        elif tag == "base":
            href = (attrib.get("href") or "").strip()
            if self.base is None and href:
                self.base = href
        elif tag == "meta" and (attrib.get("name") or "").strip().lower() in self.meta_names:
            if robots_directives_nofollow(attrib.get("content") or ""):
                self.nofollow_page = True

    def end(self, tag: str) -> None:
        pass

    def data(self, data: str) -> None:
        pass

    def close(self) -> None:
        pass


def _html_parser(target: _LinkTarget, charset: str | None) -> etree.HTMLParser:
    """libxml2's HTML parser, fed bytes: the charset of the Content-Type when it names one Python
    and libxml2 know, else libxml2's own sniffing (a ``<meta charset>``, a BOM, then Latin-1).
    No network, no DTD: an HTML page can make the parser fetch nothing."""
    options = {"target": target, "no_network": True, "remove_comments": True, "remove_pis": True}
    if charset:
        try:
            return etree.HTMLParser(encoding=charset, **options)
        except LookupError:
            pass
    return etree.HTMLParser(**options)


def links_read(
    chunks: Iterable[bytes], *, page_url: str, charset: str | None = None, product: str = "scrapejobs"
) -> PageLinks:
    """The links of an HTML page given as a stream of byte chunks (a stored body read back piece
    by piece: never held whole), by libxml2's streaming HTML parser; no regular expressions.
    A ``<meta name="robots">`` (or ``name`` our product token, ``product``) saying ``nofollow``
    or ``none`` makes every link of the page ``nofollow``, as ``rel="nofollow"`` does one link
    (FR-42)."""
    target = _LinkTarget(product.lower())
    parser = _html_parser(target, charset)
    for chunk in chunks:
        if chunk:
            parser.feed(chunk)
    try:
        parser.close()
    except etree.XMLSyntaxError:  # an empty document: nothing to read
        pass
    base = page_url
    if target.base:
        try:
            base = urljoin(page_url, target.base)
        except ValueError:
            pass
    links = urls_normalised(target.hrefs, base=base)
    # A URL the page links both with and without rel="nofollow" is followed (another link to it
    # vouches for it), and counted once.
    followed = set(links)
    unfollowed = [url for url in urls_normalised(target.nofollow_hrefs, base=base) if url not in followed]
    if target.nofollow_page:
        return PageLinks(links=[], nofollow=len(links) + len(unfollowed))
    return PageLinks(links=links, nofollow=len(unfollowed))


def links_of(html: str, *, page_url: str) -> list[str]:
    """The followed links of ``html`` (a page already in memory: tests and small callers)."""
    return links_read([html.encode("utf-8")], page_url=page_url, charset="utf-8").links


def urls_normalised(hrefs: Iterable[str], *, base: str) -> list[str]:
    """Resolved against ``base``, fragment dropped, normalised, http(s) only, each once."""
    seen: dict[str, None] = {}
    for href in hrefs:
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


# Directives of X-Robots-Tag written "name: value"; any other "word:" names a user agent.
_VALUED_DIRECTIVES = ("unavailable_after", "max-snippet", "max-image-preview", "max-video-preview")


def robots_directives_nofollow(content: str) -> bool:
    """Whether a ``<meta name="robots">`` content says not to follow the page's links:
    ``nofollow`` or ``none``, case-insensitively, among comma-separated directives."""
    return any(token.strip().lower() in ("nofollow", "none") for token in content.split(","))


def robots_header_nofollow(value: str | None, *, product: str = "scrapejobs") -> bool:
    """Whether an ``X-Robots-Tag`` value (repeated headers joined with ", ", as results keep
    them) says ``nofollow`` or ``none`` to every robot or to ``product``: ``nofollow``,
    ``noindex, nofollow``, ``scrapejobs: none``; not ``otherbot: nofollow``."""
    if not value:
        return False
    agent: str | None = None
    for piece in value.split(","):
        token = piece.strip()
        name, colon, rest = token.partition(":")
        if colon and name.strip().lower() not in _VALUED_DIRECTIVES:
            agent, token = name.strip().lower(), rest.strip()
        if token.lower() in ("nofollow", "none") and agent in (None, product):
            return True
    return False


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
    key its cached copy (apps/scraping/hop_robots.py)."""
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

    def sitemaps(self, url: str) -> tuple[str, ...]:
        """The ``Sitemap:`` lines of ``url``'s origin's robots.txt as cached (FR-43): none when no
        copy is held (or the policy ignores robots.txt)."""
        self.disallows(url)
        rules = self._rules.get(_robots_origin(url)[0])
        return rules.sitemaps if rules is not None else ()
