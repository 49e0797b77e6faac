"""Politeness per target domain (NFR-5): shared by every worker, in Redis.

Each domain has, in Redis (keys in ``apps.politeness.keys``):

- a **token bucket** (``requests_per_second``, ``burst``): a request needs a token;
- a **concurrency cap** (``max_concurrency``): a sorted set of slot holders scored by their expiry,
  so the slot of a worker killed mid-fetch frees itself once the fetch could no longer be running
  (the job's timeout plus one lease), without anyone cleaning up;
- an **adaptive rate**: AIMD over a sliding window of the domain's recent answers,
  like Scrapy's AutoThrottle but shared by every worker. When more than
  ``SCRAPEJOBS_DOMAIN_ADAPTIVE_BAD_SHARE`` of them were 429/503 or timeouts the rate is halved;
  while answers come it climbs back by one policy rate per ``SCRAPEJOBS_DOMAIN_ADAPTIVE_RECOVERY_S``;
  never above the policy's rate, never below its floor. A robots.txt ``Crawl-delay`` caps it too;
- a **cooldown-until**: set by a target's ``Retry-After`` (or a robots.txt that cannot be read);
  every worker respects it. It expires by itself;
- a **line** (NFR-9, NFR-10 at the gate): once a job is refused, every job asking for the domain
  takes a place in it, and the permits go in the same weighted-fair order as the pool's slots:
  the priorities by their weights (``SCRAPEJOBS_PRIORITY_WEIGHTS``), the tenants of a priority by
  theirs. A refused job keeps its place and is told to come back when the permits before it are
  due, so refused jobs come back spread at the domain's rate (not all at the next token), a
  deferral never sends a job to the back, and a fresh job cannot take the permit a waiting
  higher-priority job was due. A place lapses ``LINE_HOLD_S`` after its job was due back. While
  nobody waits, a job takes a free permit without the line (docs/design/politeness.md).

Each operation is one Lua script (``apps/politeness/lua/``), so concurrent workers cannot both
spend the last token or take the last slot, and every time is the Redis server's clock (``TIME``):
workers' clocks may differ.

The worker asks before it claims (``apps.scraping.domain_turn.job_domain_turn``): waiting spends no attempt, and a refused
job waits in PostgreSQL (``job_defer_for_domain``: the publisher sends it again once its
``not_before`` has passed), not in a worker thread, so the worker slot is free at once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from apps.politeness.keys import LINE_PRIORITIES, domain_keys
from apps.politeness.selectors import DomainLimits, domain_limits_cached, domain_limits_get
from apps.redis_clients import state_redis

logger = logging.getLogger(__name__)

# Answers that count against a domain's adaptive rate (with timeouts): the target says it is
# overloaded. Other failures (404, 500) say nothing about our pace.
THROTTLE_STATUSES = frozenset({429, 503})
# At least this many answers in the window before a cut: two 503s in a row out of three answers
# are not yet a share.
ADAPTIVE_MIN_ANSWERS = 20
# A domain's adaptive rate and window are forgotten this long (up to a minute more: their expiry
# is lengthened a minute at a time, outcome_record.lua) after its last answer (it starts again at
# the policy's rate).
ADAPTIVE_MEMORY_S = 3600
# A target cannot stop a domain for longer than this with one Retry-After (a hostile or broken
# "Retry-After: 31536000" would otherwise park every tenant's jobs for a year). The job's own
# retry still honours the full value (apps.jobs.lifecycle).
MAX_COOLDOWN_S = 3600
# A refused job's place in its domain's line outlives the time it was told to come back by this
# much: the publisher (beat, every second) and a busy broker may deliver the deferred job late. A
# place whose job never comes back (cancelled, its worker died) holds the permits behind it back
# for this long at most.
LINE_HOLD_S = 15

# The scripts, one file each in lua/ (their KEYS, ARGV and replies are described there), read
# once at import. Each operation is one script: see the module docstring.
_LUA = Path(__file__).resolve().parent / "lua"
# bucket.lua (the bucket as the rate in force refills it) is the head of both scripts that spend
# its tokens, so that they reckon it one way.
_BUCKET = (_LUA / "bucket.lua").read_text(encoding="utf-8")
_ACQUIRE = _BUCKET + (_LUA / "permit_acquire.lua").read_text(encoding="utf-8")
_RECORD = (_LUA / "outcome_record.lua").read_text(encoding="utf-8")
_TOKEN_TRY = _BUCKET + (_LUA / "token_try.lua").read_text(encoding="utf-8")

_scripts: dict[str, Any] = {}


def _script(name: str, source: str) -> Any:
    # Registered per client: the conftest (and a reconnect) may replace the cached client.
    client = state_redis()
    cached = _scripts.get(name)
    if cached is None or cached.registered_client is not client:
        cached = client.register_script(source)
        _scripts[name] = cached
    return cached


def gate_scripts_load() -> int:
    """Load the script every job's gate runs into the state Redis ahead of the first job (its
    first EVALSHA then finds it, with no NOSCRIPT and reload; apps/scraping/warm_up.py); returns
    how many were loaded."""
    script = _script("acquire", _ACQUIRE)
    script.registered_client.script_load(_ACQUIRE)
    return 1


@dataclass(frozen=True)
class LineShare:
    """Where a job stands in a domain's line: its priority, and its tenant with that tenant's
    weight (NFR-9, NFR-10). The publisher sends them in the job's message; a message without them
    (an older publisher's) stands as a ``normal`` job of a tenant of weight 1."""

    priority: str = "normal"
    tenant: str = ""
    weight: int = 1

    @classmethod
    def from_message(cls, priority: object, tenant: object, weight: object) -> LineShare:
        p = str(priority) if priority in LINE_PRIORITIES else "normal"
        try:
            w = max(1, int(str(weight)))
        except ValueError:
            w = 1
        return cls(priority=p, tenant=str(tenant or ""), weight=w)


DEFAULT_SHARE = LineShare()


@dataclass(frozen=True)
class DomainDecision:
    granted: bool
    wait_s: float  # when refused: come back after this long
    reason: str  # "" when granted; cooldown, queue, concurrency, rate, unavailable
    group: str = ""  # whose budget was asked (DomainLimits.group): release the slot there
    place: int = 0  # when refused: how many of the domain's permits go to others first


def domain_permit_acquire(
    *,
    domain: str,
    holder: str,
    ticket: str,
    slot_ttl_s: float,
    token_only: bool = False,
    share: LineShare = DEFAULT_SHARE,
) -> DomainDecision:
    """Take a token and a concurrency slot of host ``domain``'s group for ``holder``, or say how
    long to wait.

    ``ticket`` names the job in the domain's line: a refused job keeps its place there under it
    (``share`` says which line and how it shares it) and asks again when told. The slot frees
    itself after ``slot_ttl_s`` if ``domain_permit_release`` is never called (the worker was
    killed). ``token_only``: a redirect hop within a group whose slot the fetch already holds
    takes a token and no second slot."""
    limits = domain_limits_get(domain=domain)
    keys = domain_keys(limits.group)
    weights = settings.SCRAPEJOBS_PRIORITY_WEIGHTS
    granted, wait_ms, reason, place = _script("acquire", _ACQUIRE)(
        keys=[keys.state, keys.slots, keys.adapt, keys.fair, keys.lapses, *keys.lines],
        args=[
            limits.requests_per_second,
            limits.burst,
            limits.max_concurrency,
            holder,
            0 if token_only else slot_ttl_s,
            ticket,
            LINE_PRIORITIES.index(share.priority) + 1,
            share.tenant,
            share.weight,
            LINE_HOLD_S,
            *(weights[p] for p in LINE_PRIORITIES),
            _recovery_step(limits),
        ],
    )
    return DomainDecision(
        granted=bool(int(granted)),
        wait_s=int(wait_ms) / 1000.0,
        reason=str(reason),
        group=limits.group,
        place=int(place),
    )


def _recovery_step(limits: DomainLimits) -> float:
    """How fast the group's adaptive rate climbs back while answers come (rate per second per
    second; 0 with adaptation off): the gate tells a refused job its turn at that climbing rate."""
    if not settings.SCRAPEJOBS_DOMAIN_ADAPTIVE:
        return 0.0
    return limits.requests_per_second / settings.SCRAPEJOBS_DOMAIN_ADAPTIVE_RECOVERY_S


def domain_token_try(*, domain: str) -> bool:
    """Take one token of host ``domain``'s group now, or be refused at once (no wait, no place
    taken in its line, refused while jobs wait there): a rendered page's subresource of the page's own registrable domain
    (NFR-32, docs/design/browser.md), which is loaded now or not at all."""
    limits = domain_limits_get(domain=domain)
    keys = domain_keys(limits.group)
    granted = _script("token_try", _TOKEN_TRY)(
        keys=[keys.state, keys.adapt], args=[limits.requests_per_second, limits.burst]
    )
    return bool(int(granted))


def domain_permit_release(*, domain: str, holder: str) -> None:
    """Give the concurrency slot back (one ZREM: atomic without a script). ``domain`` is the
    group the slot was taken from (``DomainDecision.group``)."""
    state_redis().zrem(domain_keys(domain).slots, holder)


def domain_outcome_record(
    *, domain: str, http_status: int | None, retry_after_s: float | None, timed_out: bool = False
) -> float:
    """Tell host ``domain``'s group how the target answered: every answer moves the adaptive rate
    (see the module docstring), and a ``Retry-After`` pauses the group for that long (at most
    ``MAX_COOLDOWN_S``). Returns the pause left in seconds (0: none). With adaptation off, only a
    Retry-After costs a Redis call."""
    call = _record_call(
        domain_limits_get(domain=domain),
        http_status=http_status,
        retry_after_s=retry_after_s,
        timed_out=timed_out,
        pause_wanted=True,
    )
    if call is None:
        return 0.0
    keys, args = call
    left_ms, _rate = _script("record", _RECORD)(keys=keys, args=args)
    return int(left_ms) / 1000.0


def domain_outcome_record_into(
    pipe: Any, *, domain: str, http_status: int | None, retry_after_s: float | None, timed_out: bool = False
) -> bool:
    """``domain_outcome_record`` queued on the caller's pipeline (its reply is the script's) when
    host ``domain``'s limits are in this process's cache: no query, so the pipeline is never
    held up by PostgreSQL. True when the answer is taken care of (queued, or nothing to record);
    False when the limits are not at hand: the caller records it with ``domain_outcome_record``."""
    limits = domain_limits_cached(domain=domain)
    if limits is None:
        return False
    # Nobody reads this reply's pause: without a Retry-After the script need not read it either.
    call = _record_call(
        limits, http_status=http_status, retry_after_s=retry_after_s, timed_out=timed_out, pause_wanted=False
    )
    if call is not None:
        keys, args = call
        # EVAL, not the cached script's EVALSHA: a pipeline cannot reload a script Redis lost
        # (a restart) before its other commands run, and redis-py's pipeline would ask whether
        # the script exists, a round trip of its own, at every execute.
        pipe.eval(_RECORD, len(keys), *keys, *args)
    return True


def _record_call(
    limits: DomainLimits,
    *,
    http_status: int | None,
    retry_after_s: float | None,
    timed_out: bool,
    pause_wanted: bool,
) -> tuple[list[str], list[Any]] | None:
    """The record script's keys and arguments for an answer under ``limits``; None when there is
    nothing to record (adaptation off and no Retry-After). ``pause_wanted``: the reply's pause
    left is read by the caller (else it is 0 unless the answer carried a Retry-After)."""
    adapt = settings.SCRAPEJOBS_DOMAIN_ADAPTIVE
    if not adapt and not retry_after_s:
        return None
    keys = domain_keys(limits.group)
    ceiling = limits.requests_per_second
    return (
        [keys.state, keys.adapt, keys.outcomes],
        [
            max(0.0, retry_after_s or 0.0),
            "1" if timed_out or http_status in THROTTLE_STATUSES else "0",
            "1" if adapt else "0",
            ceiling,
            limits.floor_rps,
            settings.SCRAPEJOBS_DOMAIN_ADAPTIVE_WINDOW,
            ADAPTIVE_MIN_ANSWERS,
            settings.SCRAPEJOBS_DOMAIN_ADAPTIVE_BAD_SHARE,
            _recovery_step(limits),
            MAX_COOLDOWN_S,
            ADAPTIVE_MEMORY_S,
            "1" if pause_wanted else "0",
        ],
    )


def domain_crawl_delay_set(*, domain: str, delay_s: float | None, ttl_s: float) -> None:
    """A robots.txt ``Crawl-delay`` for host ``domain``'s group, kept as long as the robots file
    is (``ttl_s``): the acquire script caps the group's rate at one request per ``delay_s``. None
    (the file sets none) lifts it."""
    key = domain_keys(domain_limits_get(domain=domain).group).adapt
    r = state_redis()
    if not delay_s:
        r.hdel(key, "crawl")
        return
    with r.pipeline(transaction=True) as pipe:
        pipe.hset(key, "crawl", f"{delay_s:.6f}")
        pipe.expire(key, int(max(ttl_s, ADAPTIVE_MEMORY_S)))
        # The answer script keeps when the hash expires ('until', outcome_record.lua): no longer so.
        pipe.hdel(key, "until")
        pipe.execute()
