"""Reads for politeness: a domain's limits (cached briefly per process), the job facts the worker
needs before it claims, and the live Redis state an operator sees in the admin."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db.models.functions import Now

from apps.db_failures import database_failure
from apps.jobs.models import Job, JobStatus
from apps.politeness.domains import registrable_domain
from apps.politeness.keys import LINE_PRIORITIES, domain_keys
from apps.politeness.models import DomainGrouping, DomainPolicy
from apps.redis_clients import state_redis
from apps.runtime.single_flight import SingleFlight
from apps.tenants.models import Tenant

logger = logging.getLogger(__name__)

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
    # The adaptive rate's floor (``SCRAPEJOBS_DOMAIN_ADAPTIVE_FLOOR_RPS`` unless the policy says).
    floor_rps: float = 0.0
    obey_robots: bool = True
    # Whose budget a job of this host spends: the host itself, or its registrable domain when a
    # policy groups them. The Redis keys of the domain's state are named after it.
    group: str = ""
    # The policy's egress proxy (FR-28): None follows SCRAPEJOBS_EGRESS_PROXY, "none" is direct.
    egress_proxy: str | None = None


_cache: dict[str, tuple[float, DomainLimits]] = {}
_reads: SingleFlight[str, DomainLimits] = SingleFlight()


def domain_limits_default(*, host: str = "") -> DomainLimits:
    return DomainLimits(
        requests_per_second=settings.SCRAPEJOBS_DOMAIN_DEFAULT_RPS,
        burst=settings.SCRAPEJOBS_DOMAIN_DEFAULT_BURST,
        max_concurrency=settings.SCRAPEJOBS_DOMAIN_DEFAULT_CONCURRENCY,
        floor_rps=settings.SCRAPEJOBS_DOMAIN_ADAPTIVE_FLOOR_RPS,
        group=host,
    )


def domain_limits_get(*, domain: str) -> DomainLimits:
    """The limits a job to host ``domain`` obeys, and the group whose budget it spends; at most
    ``POLICY_CACHE_S`` old. Unknown hosts are cached too, so a host without a policy costs no
    query per job either.

    The host's own policy wins; without one, a policy on its registrable domain that groups by
    registrable domain covers it (one policy on ``shop.com`` for ``www.`` and ``img.shop.com``);
    without either, the defaults, for the host alone."""
    now = time.monotonic()
    hit = _cache.get(domain)
    if hit is not None and hit[0] > now:
        return hit[1]
    try:
        # One read per process for the threads that miss at once (a worker's whole pool starting
        # on a new site, or the copy expiring under load).
        limits = _reads.run(domain, lambda: _limits_read(host=domain))
    except Exception as e:
        # PostgreSQL away: the last limits read serve another while (a worker in the middle of
        # an attempt must not fail it, nor wait for the pool again at every call). With none
        # read yet, the error stands: the gate then has the message delivered again.
        if hit is None or database_failure(e) is None:
            raise
        logger.warning("domain policy of %s unreadable; the last one read still applies", domain)
        limits = hit[1]
    if len(_cache) >= _CACHE_MAX_DOMAINS:
        _cache.clear()
    _cache[domain] = (now + POLICY_CACHE_S, limits)
    return limits


def domain_limits_cached(*, domain: str) -> DomainLimits | None:
    """``domain_limits_get``'s answer when this process read it less than ``POLICY_CACHE_S`` ago,
    else None: never a query, for a caller that must not wait on PostgreSQL (the worker's
    end-of-attempt round trip, which hands in the receipt)."""
    hit = _cache.get(domain)
    return hit[1] if hit is not None and hit[0] > time.monotonic() else None


def _limits_read(*, host: str) -> DomainLimits:
    registrable = registrable_domain(host)
    rows = {
        row["domain"]: row
        for row in DomainPolicy.objects.filter(domain__in={host, registrable}).values(
            "domain",
            "requests_per_second",
            "burst",
            "max_concurrency",
            "min_requests_per_second",
            "grouping",
            "obey_robots",
            "egress_proxy",
        )
    }
    row = rows.get(host)
    if row is None:
        row = rows.get(registrable)
        if row is None or row["grouping"] != DomainGrouping.REGISTRABLE:
            return domain_limits_default(host=host)
    grouped = row["grouping"] == DomainGrouping.REGISTRABLE
    return DomainLimits(
        requests_per_second=row["requests_per_second"],
        burst=row["burst"],
        max_concurrency=row["max_concurrency"],
        floor_rps=row["min_requests_per_second"] or settings.SCRAPEJOBS_DOMAIN_ADAPTIVE_FLOOR_RPS,
        obey_robots=row["obey_robots"],
        group=registrable if grouped else host,
        egress_proxy=row["egress_proxy"].strip() or None,
    )


def domain_limits_cache_clear() -> None:
    _cache.clear()
    _tenant_robots.clear()


_tenant_robots: dict[uuid.UUID | str, tuple[float, bool]] = {}


def tenant_obeys_robots(*, tenant_id: uuid.UUID | str | None) -> bool:
    """Whether a tenant's jobs read robots.txt (an operator may switch it off per tenant); cached
    like the policies, so a worker does not query per job."""
    if tenant_id is None:
        return True
    now = time.monotonic()
    hit = _tenant_robots.get(tenant_id)
    if hit is not None and hit[0] > now:
        return hit[1]
    try:
        obeys = Tenant.objects.filter(id=tenant_id).values_list("obey_robots", flat=True).first()
    except Exception as e:
        if hit is None or database_failure(e) is None:
            raise
        obeys = hit[1]  # PostgreSQL away: the last switch read, as for the domain policies
    if len(_tenant_robots) >= _CACHE_MAX_DOMAINS:
        _tenant_robots.clear()
    _tenant_robots[tenant_id] = (now + POLICY_CACHE_S, obeys is not False)
    return obeys is not False


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
    in_line: dict[str, int]  # jobs waiting in the domain's line, by priority
    adaptive_rps: float | None  # None: never throttled lately (the policy's rate holds)
    crawl_delay_s: float | None  # from robots.txt, None when it sets none


def domain_state_get(*, domain: str) -> DomainState:
    """``domain`` is a group key (``DomainLimits.group``): a host, or a registrable domain."""
    keys = domain_keys(domain)
    r = state_redis()
    now_s, now_us = r.time()
    now = now_s + now_us / 1e6
    with r.pipeline(transaction=False) as pipe:
        pipe.hmget(keys.state, "tokens", "cooldown")
        pipe.hmget(keys.adapt, "rate", "crawl")
        pipe.zcount(keys.slots, f"({now}", "+inf")
        for line in keys.lines:
            pipe.zcard(line)
        (tokens, cooldown), (rate, crawl), in_flight, *lines = pipe.execute()
    return DomainState(
        in_flight=int(in_flight),
        tokens=float(tokens) if tokens is not None else None,
        cooldown_s=max(0.0, float(cooldown) - now) if cooldown else 0.0,
        in_line={p: int(n) for p, n in zip(LINE_PRIORITIES, lines, strict=True)},
        adaptive_rps=float(rate) if rate else None,
        crawl_delay_s=float(crawl) if crawl else None,
    )
