"""Politeness on a fetch's redirect hops (NFR-24): each hop is charged to the domain it goes to
(``RedirectCharges``), a hop refused ends the attempt as a deferral (``RedirectDeferred``), and a
hop within the group the fetch held is kept for the job's next attempt to go on from
(``HopResume``). The fetch that follows the hops is apps/scraping/fetch.py's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
from dataclasses import dataclass

import redis

from apps.politeness.limiter import DEFAULT_SHARE, LineShare, domain_permit_acquire, domain_permit_release
from apps.politeness.selectors import domain_limits_get
from apps.redis_clients import state_redis

logger = logging.getLogger(__name__)

# A redirect hop with no turn is a deferral, never a wait in the thread (NFR-5, NFR-24). A hop
# within the group its fetch already holds is kept (``HopResume``) this long past its wait, so that
# the job's next attempt goes on from it instead of walking the chain from its first URL again
# (which, at a burst of 1, would never get a chain of two requests through).
HOP_RESUME_GRACE_S = 300.0


class RedirectDeferred(Exception):
    """A redirect hop's domain has no turn for this fetch now (NFR-24): the attempt ends as a
    deferral, and the job starts again after ``wait_s``, when its place in that domain's line
    comes: from its own URL, or, when the hop's group was the one the fetch held
    (``same_group``), from that hop. Waiting for it here would hold the worker thread (NFR-5:
    waiting for a domain holds no worker slot)."""

    def __init__(self, *, host: str, wait_s: float, reason: str, same_group: bool = False):
        super().__init__(f"redirected to {host}, which has no turn for it for {wait_s:.2f}s ({reason})")
        self.host, self.wait_s, self.reason, self.same_group = host, wait_s, reason, same_group


@dataclass(frozen=True)
class HopResume:
    """Where a job's redirect chain stopped for want of a token of the group it already held:
    its next attempt (from ``url_from``, the job's URL) goes on at ``url`` as hop ``hop``, with
    what the hops before it changed (a switch to GET, origin-bound headers dropped)."""

    url_from: str
    url: str
    hop: int
    to_get: bool
    cross_origin: bool


def _resume_key(ticket: str) -> str:
    return f"sj:hop-resume:{ticket}"


def hop_resume_keep(*, ticket: str, resume: HopResume, ttl_s: float) -> None:
    try:
        state_redis().set(
            _resume_key(ticket),
            json.dumps(dataclasses.asdict(resume)),
            px=max(1, int(ttl_s * 1000)),
        )
    except redis.RedisError:
        # The next attempt then starts from the job's own URL, as a deferral always did.
        logger.warning("keeping a deferred redirect hop failed", exc_info=True)


def hop_resume_take(*, ticket: str) -> HopResume | None:
    try:
        raw = state_redis().getdel(_resume_key(ticket))
    except redis.RedisError:
        logger.warning("reading a deferred redirect hop failed", exc_info=True)
        return None
    if raw is None:
        return None
    return HopResume(**json.loads(raw))


class RedirectCharges:
    """The permits a fetch's redirect hops take: each hop is charged to the domain it goes to.
    The first URL's domain group is held by the worker's gate; a hop within a group already held
    takes a token only, a hop to another group a token and a slot, released when the fetch ends
    (or expiring by themselves if the worker dies). A hop refused raises ``RedirectDeferred``
    with its place kept in that domain's line under ``ticket`` (the job's, so that the job's
    next attempt, coming back at that time, takes its turn there where it stood)."""

    def __init__(self, *, first_host: str, ticket: str, slot_ttl_s: float, share: LineShare = DEFAULT_SHARE):
        self.holder = f"hop:{secrets.token_hex(8)}"
        self.ticket = f"hop:{ticket}" if ticket else self.holder
        # A hop within the group the fetch holds keeps the job's own place in that group's line:
        # the job's next attempt, going on from that hop (HopResume), asks the worker's gate there.
        self.own_ticket = ticket or self.holder
        self.share = share
        self.slot_ttl_s = slot_ttl_s
        self.held = {domain_limits_get(domain=first_host).group}
        self.taken: list[str] = []

    def charge(self, *, host: str) -> None:
        """Take the hop's permit of ``host``; raises ``RedirectDeferred`` when it has none now."""
        group = domain_limits_get(domain=host).group
        token_only = group in self.held
        # No wait in the thread for any hop (NFR-5): one refused is a deferral; one within the
        # group the fetch holds is kept for the job's next attempt to go on from (HopResume).
        try:
            decision = domain_permit_acquire(
                domain=host,
                holder=self.holder,
                ticket=self.own_ticket if token_only else self.ticket,
                slot_ttl_s=self.slot_ttl_s,
                token_only=token_only,
                share=self.share,
            )
        except redis.RedisError:
            # The gate already failed closed for the job's own domain; a hop is not worth
            # failing a fetch in flight for.
            logger.warning("politeness state unavailable for a redirect to %s", host, exc_info=True)
            return
        if not decision.granted:
            raise RedirectDeferred(
                host=host, wait_s=decision.wait_s, reason=decision.reason, same_group=token_only
            )
        if not token_only:
            self.held.add(group)
            self.taken.append(group)

    def release(self) -> None:
        for group in self.taken:
            try:
                domain_permit_release(domain=group, holder=self.holder)
            except redis.RedisError:
                logger.warning("releasing a redirect slot of %s failed; it expires by itself", group)
