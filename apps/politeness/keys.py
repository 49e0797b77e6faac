"""Redis key names of one domain's politeness state.

Every key of a domain carries the domain in braces (a Redis Cluster hash tag), so the keys one
script touches live on one node. "Domain" here is the key a policy groups hosts under: the exact
host, or its registrable domain (``apps.politeness.selectors.domain_rules_get``)."""

from __future__ import annotations

from dataclasses import dataclass

# The priorities of a domain's line, in the order the acquire script numbers them (1, 2, 3).
LINE_PRIORITIES = ("high", "normal", "low")


@dataclass(frozen=True)
class DomainKeys:
    state: str  # hash: token bucket (tokens, ts), cooldown-until, jobs in the line (queued)
    slots: str  # sorted set: concurrency slot holders scored by their expiry (Unix s)
    adapt: str  # hash: adaptive rate (rate, ts), bad answers in the window (bad), crawl-delay
    outcomes: str  # list: the window of recent answers, newest first, "1" bad / "0" good
    # The line (lua/permit_acquire.lua): one sorted set per priority (LINE_PRIORITIES) of the
    # jobs waiting, scored by their fair-queueing tag; when each place lapses; the round robin's
    # credits and each tenant's last tag.
    lines: tuple[str, str, str]
    lapses: str
    fair: str


def domain_keys(domain: str) -> DomainKeys:
    base = f"sj:pol:{{{domain}}}"
    return DomainKeys(
        state=f"{base}:state",
        slots=f"{base}:slots",
        adapt=f"{base}:adapt",
        outcomes=f"{base}:outcomes",
        lines=(f"{base}:line:high", f"{base}:line:normal", f"{base}:line:low"),
        lapses=f"{base}:lapses",
        fair=f"{base}:fair",
    )


def robots_keys(origin: str) -> tuple[str, str]:
    """The cached robots.txt of ``origin`` (scheme://host:port) and the lock of whoever fetches it."""
    return f"sj:robots:{{{origin}}}", f"sj:robots:{{{origin}}}:lock"
