"""Reads for politeness: a domain's limits (cached briefly per process), the job facts the worker
needs before it claims, and the live Redis state an operator sees in the admin."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db.models.functions import Now

from apps.jobs.models import Job, JobStatus
from apps.jobs.redis import state_redis
from apps.politeness.keys import domain_keys
from apps.politeness.models import DomainPolicy

# How long a worker keeps a domain's limits before asking PostgreSQL again: an admin edit takes
# effect everywhere within this long, and a worker does not query the database per job.
POLICY_CACHE_S = 5.0
# Safety valve for the cache: a crawl over millions of distinct domains must not grow it forever.
_CACHE_MAX_DOMAINS = 10_000


@dataclass(frozen=True)
class DomainLimits:
    requests_per_second: float
    burst: int
    max_concurrency: int


_cache: dict[str, tuple[float, DomainLimits]] = {}


def domain_limits_default() -> DomainLimits:
    return DomainLimits(
        requests_per_second=settings.SCRAPEJOBS_DOMAIN_DEFAULT_RPS,
        burst=settings.SCRAPEJOBS_DOMAIN_DEFAULT_BURST,
        max_concurrency=settings.SCRAPEJOBS_DOMAIN_DEFAULT_CONCURRENCY,
    )


def domain_limits_get(*, domain: str) -> DomainLimits:
    """The domain's policy, or the defaults; at most ``POLICY_CACHE_S`` old. Unknown domains are
    cached too, so a domain without a policy costs no query per job either."""
    now = time.monotonic()
    hit = _cache.get(domain)
    if hit is not None and hit[0] > now:
        return hit[1]
    row = (
        DomainPolicy.objects.filter(domain=domain)
        .values_list("requests_per_second", "burst", "max_concurrency")
        .first()
    )
    limits = DomainLimits(*row) if row is not None else domain_limits_default()
    if len(_cache) >= _CACHE_MAX_DOMAINS:
        _cache.clear()
    _cache[domain] = (now + POLICY_CACHE_S, limits)
    return limits


def domain_limits_cache_clear() -> None:
    _cache.clear()


@dataclass(frozen=True)
class RunnableJob:
    domain: str
    timeout_s: int


def job_runnable_get(*, job_id: uuid.UUID | str) -> RunnableJob | None:
    """The domain and timeout of a job ``job_claim`` would take now; None otherwise (a duplicate
    message, a final or cancelled job, a retry whose time has not come). One primary-key lookup,
    made before asking the domain for a token so that a duplicate message spends none."""
    row = (
        Job.objects.filter(
            id=job_id,
            status=JobStatus.QUEUED,
            cancel_requested_at__isnull=True,
        )
        .exclude(not_before__gt=Now())  # the database's clock, as job_claim's
        .values_list("domain", "timeout_s")
        .first()
    )
    return RunnableJob(domain=row[0], timeout_s=row[1]) if row is not None else None


@dataclass(frozen=True)
class DomainState:
    """What Redis holds for a domain right now (for operators)."""

    in_flight: int
    tokens: float | None
    cooldown_s: float  # seconds left, 0 when none
    booked_ahead_s: float  # how far ahead deferred jobs are booked, 0 when none


def domain_state_get(*, domain: str) -> DomainState:
    keys = domain_keys(domain)
    r = state_redis()
    now_s, now_us = r.time()
    now = now_s + now_us / 1e6
    tokens, cooldown, booked = r.hmget(keys.state, "tokens", "cooldown", "next")
    in_flight = r.zcount(keys.slots, f"({now}", "+inf")
    return DomainState(
        in_flight=int(in_flight),
        tokens=float(tokens) if tokens is not None else None,
        cooldown_s=max(0.0, float(cooldown) - now) if cooldown else 0.0,
        booked_ahead_s=max(0.0, float(booked) - now) if booked else 0.0,
    )
