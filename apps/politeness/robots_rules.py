"""robots.txt rules (RFC 9309): parsing a file into the rules that apply to us, and matching a
path against them. Caching them per origin is apps/politeness/robots.py's.

Parsing follows the RFC, not ``urllib.robotparser`` (which takes the first matching rule, not
the longest, and knows no ``*`` or ``$``): the group whose user-agent line names our product token
(case-insensitively; a line's token is its leading letters, ``-`` and ``_``, so
``scrapejobs/1.0`` names us, as Google's parser reads it: FR-44), else the ``*`` group, groups of
the same agent merged; the longest matching ``allow``/``disallow`` path wins, ``allow`` on a tie;
``*`` matches any run of characters, ``$`` anchors the end; ``/robots.txt`` itself is always
allowed. Matching is linear in the path's length (``RobotsRule.matches``: no regular
expression), and a file of a hostile target is bounded: at most ``SCRAPEJOBS_ROBOTS_MAX_RULES``
rules apply and ``SCRAPEJOBS_ROBOTS_MAX_WILDCARDS`` wildcards count in a rule (docs/limits.md).
``Crawl-delay`` (not in the RFC, but widely used) is read from the chosen group.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from django.conf import settings

logger = logging.getLogger(__name__)

# Rules past the first 500 KiB of a file are dropped (Google's parser reads no further), and past
# this many bytes of rule patterns (normalised: a non-ASCII octet counts as its %XX): the parsed
# form, what Redis and each process keep of a file, stays under it whatever the file holds.
MAX_PARSE_BYTES = 500 * 1024
MAX_RULES_BYTES = 512 * 1024
# The longest Crawl-delay honoured: a file saying "inf" or "1e14" would otherwise stop the domain
# for every tenant (the gate's rate would be 0). Past it, one request a minute.
MAX_CRAWL_DELAY_S = 60.0
# What one kept rule costs in memory besides its pieces' characters (objects, tuple, strings).
_RULE_OVERHEAD_BYTES = 200
RULES_OVERHEAD_BYTES = 300

# The most ``Sitemap:`` lines of a file kept.
MAX_SITEMAP_LINES = 50


@dataclass(frozen=True)
class RobotsRule:
    """One ``allow``/``disallow`` line: its path pattern cut at every ``*`` into literal pieces,
    and whether a final ``$`` anchors it to the end of the path."""

    length: int  # the pattern's length in octets: the longest matching rule wins (RFC 9309 2.2.2)
    allow: bool
    pieces: tuple[str, ...]
    anchored: bool

    def matches(self, path: str) -> bool:
        """Whether the pattern matches a prefix of ``path`` (all of it when anchored).

        Linear in the length of the path, whatever the pattern: the first piece must start the
        path, and every later piece is taken at its leftmost place after the one before
        (``str.find``, which never backtracks; CPython switches to the two-way search for long
        needles). The leftmost place is always right: a ``*`` matches any run, so matching a
        piece earlier leaves more path for the pieces after it. Only an anchored pattern's last
        piece has a fixed place, the end of the path. A regular expression of ``.*`` runs
        (``/*a*a*a*a*b`` against ``/aaaa...``) backtracks for seconds to forever instead, holding
        the GIL: the whole worker froze (docs/design/politeness.md)."""
        pieces = self.pieces
        if not path.startswith(pieces[0]):
            return False
        pos = len(pieces[0])
        if len(pieces) == 1:
            return not self.anchored or pos == len(path)
        for piece in pieces[1:-1]:
            found = path.find(piece, pos)
            if found < 0:
                return False
            pos = found + len(piece)
        last = pieces[-1]
        if self.anchored:
            return len(path) - len(last) >= pos and path.endswith(last)
        return path.find(last, pos) >= 0


@dataclass(frozen=True)
class RobotsRules:
    # Longest first, allow before disallow on a tie: the first rule that matches decides.
    rules: tuple[RobotsRule, ...] = ()
    crawl_delay_s: float | None = None
    # The file's ``Sitemap:`` lines (not part of any group), at most MAX_SITEMAP_LINES: a crawl's
    # sitemaps (docs/crawls.md).
    sitemaps: tuple[str, ...] = ()

    def size_bytes(self) -> int:
        """About what these rules take in a process's memory (the local cache's measure)."""
        return (
            RULES_OVERHEAD_BYTES
            + sum(_RULE_OVERHEAD_BYTES + sum(len(piece) for piece in rule.pieces) for rule in self.rules)
            + sum(_RULE_OVERHEAD_BYTES + len(url) for url in self.sitemaps)
        )

    def allows(self, path: str) -> bool:
        """Whether ``path`` (path and query, percent-encoded as sent) may be fetched."""
        path = _normalise(path or "/")
        if path == "/robots.txt":
            return True
        for rule in self.rules:
            if rule.matches(path):
                return rule.allow
        return True


ALLOW_ALL = RobotsRules()


def robots_parse(text: str, *, product: str) -> RobotsRules:
    """The rules of ``text`` that apply to the crawler whose product token is ``product``."""
    groups: list[tuple[list[str], list[tuple[str, str]]]] = []
    agents: list[str] = []
    lines: list[tuple[str, str]] = []
    in_rules = False
    sitemaps: list[str] = []
    if len(text) > MAX_PARSE_BYTES // 4 and len(text.encode()) > MAX_PARSE_BYTES:
        # Google's parser reads 500 KiB: the rules past it are dropped, with a line cut there.
        text = text.encode()[:MAX_PARSE_BYTES].decode(errors="ignore").rsplit("\n", 1)[0]
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if ":" not in line:
            continue
        field, value = (part.strip() for part in line.split(":", 1))
        field = field.lower()
        if field == "sitemap":
            if value and len(sitemaps) < MAX_SITEMAP_LINES:  # the URL's own ":" is in ``value``
                sitemaps.append(value)
        elif field == "user-agent":
            if in_rules:  # a user-agent line after rules starts a new group
                groups.append((agents, lines))
                agents, lines, in_rules = [], [], False
            agents.append(_agent_token(value))
        elif field in ("allow", "disallow", "crawl-delay") and agents:
            in_rules = True
            lines.append((field, value))
    if agents:
        groups.append((agents, lines))
    product = product.lower()
    chosen = [rules for names, rules in groups if product in names]
    if not chosen:
        chosen = [rules for names, rules in groups if "*" in names]
    parsed = _rules_of([line for rules in chosen for line in rules])
    return dataclasses.replace(parsed, sitemaps=tuple(dict.fromkeys(sitemaps)))


def _agent_token(value: str) -> str:
    """The product token a ``User-agent`` line names, as Google's parser reads it (FR-44): its
    leading letters, ``-`` and ``_``, lower-cased, so ``ScrapeJobs/1.0 (+https://…)`` names
    ``scrapejobs``; ``*`` is every crawler."""
    value = value.strip()
    if value.startswith("*"):
        return "*"
    end = 0
    while end < len(value) and value[end].isascii() and (value[end].isalpha() or value[end] in "-_"):
        end += 1
    return value[:end].lower()


def _rules_of(lines: list[tuple[str, str]]) -> RobotsRules:
    rules: list[RobotsRule] = []
    crawl_delay: float | None = None
    max_rules = settings.SCRAPEJOBS_ROBOTS_MAX_RULES
    max_wildcards = settings.SCRAPEJOBS_ROBOTS_MAX_WILDCARDS
    ignored = 0
    kept_bytes = 0
    for field, value in lines:
        if field == "crawl-delay":
            try:
                delay = float(value)
            except ValueError:
                continue
            if delay == delay:  # not NaN: a negative is none, "inf" or 1e14 the cap
                crawl_delay = min(max(0.0, delay), MAX_CRAWL_DELAY_S) or None
        elif value:  # an empty disallow allows everything: it matches nothing
            if len(rules) >= max_rules or kept_bytes >= MAX_RULES_BYTES:
                ignored += 1
                continue
            path = _normalise(value)
            if kept_bytes + len(path) > MAX_RULES_BYTES:
                ignored += 1
                kept_bytes = MAX_RULES_BYTES  # and every rule after it: rules past the cap dropped
                continue
            rule = _rule(path, allow=field == "allow", max_wildcards=max_wildcards)
            if rule is None:
                ignored += 1
            else:
                rules.append(rule)
                kept_bytes += len(path)
    if ignored:
        logger.warning(
            "robots.txt: %d rules past the caps ignored or narrowed (%d rules, %d bytes of rules, %d wildcards a rule)",
            ignored,
            max_rules,
            MAX_RULES_BYTES,
            max_wildcards,
        )
    rules.sort(key=lambda r: (r.length, r.allow), reverse=True)
    return RobotsRules(rules=tuple(rules), crawl_delay_s=crawl_delay)


def _rule(path: str, *, allow: bool, max_wildcards: int) -> RobotsRule | None:
    """The rule of one line's (normalised) path; None for an allow past the wildcard cap.

    Past ``SCRAPEJOBS_ROBOTS_MAX_WILDCARDS``, a rule errs on the side of not fetching: a disallow
    is cut after its last allowed wildcard (it then matches every path it matched, and more), an
    allow is dropped (it then allows nothing it did not)."""
    anchored = path.endswith("$")
    # A run of ``*`` is one wildcard (``re.sub`` of a single class: no backtracking).
    pieces = re.sub(r"\*+", "*", path[:-1] if anchored else path).split("*")
    if len(pieces) - 1 > max_wildcards:
        if allow:
            return None
        pieces, anchored = pieces[: max_wildcards + 1], False
    return RobotsRule(length=len(path), allow=allow, pieces=tuple(pieces), anchored=anchored)


def _normalise(path: str) -> str:
    """Compare paths with their unreserved characters decoded (RFC 9309 2.2.2): ``/%7Efoo`` and
    ``/~foo`` are one path, while an encoded ``/`` or ``?`` stays encoded; and octets outside
    US-ASCII percent-encoded (a rule's ``/ツ`` is the URL's ``/%E3%83%84``)."""
    path = re.sub(r"%[0-9A-Fa-f]{2}", _decoded_if_unreserved, path)
    return path if path.isascii() else quote(path, safe=_ASCII)


_ASCII = "".join(chr(i) for i in range(0x20, 0x7F))


def _decoded_if_unreserved(match: re.Match[str]) -> str:
    char = unquote(match.group())
    return char if char.isascii() and (char.isalnum() or char in "-._~") else match.group().upper()


def product_token(user_agent: str) -> str:
    """``scrapejobs/1.0 (+https://...)`` -> ``scrapejobs``: what a robots.txt user-agent line names."""
    return re.split(r"[/\s]", user_agent.strip(), maxsplit=1)[0] or "*"
