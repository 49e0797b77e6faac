"""Redis key names of one domain's politeness state.

Every key of a domain carries the domain in braces (a Redis Cluster hash tag), so the keys one
script touches live on one node."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DomainKeys:
    state: str  # hash: token bucket (tokens, ts), booking pointer (next), cooldown-until
    slots: str  # sorted set: concurrency slot holders scored by their expiry (Unix s)
    throttled: str  # sorted set: recent 429/503 answers, scored by time

    def ticket(self, job_id: str) -> str:
        """A deferred job's booked place in the domain's line (see lua/permit_acquire.lua)."""
        return f"{self.state.rsplit(':', 1)[0]}:ticket:{job_id}"


def domain_keys(domain: str) -> DomainKeys:
    base = f"sj:pol:{{{domain}}}"
    return DomainKeys(state=f"{base}:state", slots=f"{base}:slots", throttled=f"{base}:throttled")
