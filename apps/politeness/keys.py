"""Redis key names of one domain's politeness state.

Every key of a domain carries the domain in braces (a Redis Cluster hash tag), so the keys one
script touches live on one node. "Domain" here is the key a policy groups hosts under: the exact
host, or its registrable domain (``apps.politeness.selectors.domain_rules_get``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DomainKeys:
    state: str  # hash: token bucket (tokens, ts), booking pointer (next), cooldown-until
    slots: str  # sorted set: concurrency slot holders scored by their expiry (Unix s)
    adapt: str  # hash: adaptive rate (rate, ts), bad answers in the window (bad), crawl-delay
    outcomes: str  # list: the window of recent answers, newest first, "1" bad / "0" good

    def ticket(self, job_id: str) -> str:
        """A deferred job's booked place in the domain's line (see lua/permit_acquire.lua)."""
        return f"{self.state.rsplit(':', 1)[0]}:ticket:{job_id}"


def domain_keys(domain: str) -> DomainKeys:
    base = f"sj:pol:{{{domain}}}"
    return DomainKeys(
        state=f"{base}:state", slots=f"{base}:slots", adapt=f"{base}:adapt", outcomes=f"{base}:outcomes"
    )


def robots_keys(origin: str) -> tuple[str, str]:
    """The cached robots.txt of ``origin`` (scheme://host:port) and the lock of whoever fetches it."""
    return f"sj:robots:{{{origin}}}", f"sj:robots:{{{origin}}}:lock"
