"""The worker's gate (NFR-5): a job asks its domain for a turn before it is claimed
(``job_domain_turn``), and the turn it gets (``DomainTurn``) gives its concurrency slot back and
reports how the target answered. The domain's budget itself (token bucket, slots, line, adaptive
rate) is the politeness app's (``apps.politeness.limiter``); what a refusal does to the job (it
waits in the outbox, no attempt spent) is the attempt's, hence here, beside it.
"""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
from django.conf import settings

from apps.jobs.outbox import job_defer_for_domain, waiting_for_domain_refusal
from apps.politeness.keys import domain_keys
from apps.politeness.limiter import (
    DEFAULT_SHARE,
    DomainDecision,
    LineShare,
    domain_outcome_record,
    domain_outcome_record_into,
    domain_permit_acquire,
    domain_permit_release,
)
from apps.politeness.selectors import job_runnable_get

logger = logging.getLogger(__name__)

# When Redis cannot be asked, the job waits this long in the database: refusing is the polite
# failure (every worker would otherwise hit the target unthrottled during the outage).
UNAVAILABLE_DEFER_S = 5.0


@dataclass(eq=False)
class DomainTurn:
    """A job's permission to contact its domain now; ``record`` reports how the target answered.

    The concurrency slot is given back when the turn ends (``job_domain_turn``'s exit), or earlier
    inside the caller's own Redis pipeline (``release_into``); the answer likewise rides in that
    pipeline when it can (``record_into``), so that the worker's end-of-attempt bookkeeping is one
    round trip. Either is done once: after the ``_into`` version, the other does nothing."""

    domain: str  # the job's host
    holder: str
    group: str = ""  # whose slot it holds (DomainDecision.group)
    released: bool = False
    recorded: bool = False

    def record(
        self,
        *,
        http_status: int | None,
        retry_after_s: float | None,
        timed_out: bool = False,
        answered_url: str | None = None,
    ) -> None:
        """``answered_url``: the URL that gave the answer when known; its host's domain is the one
        the answer is about (a redirect may have led to another), the job's host otherwise.
        Nothing when ``record_into`` queued the answer already."""
        if self.recorded:
            return
        domain = self._answering_domain(answered_url)
        try:
            domain_outcome_record(
                domain=domain, http_status=http_status, retry_after_s=retry_after_s, timed_out=timed_out
            )
        except Exception:  # noqa: BLE001 - Redis, or the policy's read (PostgreSQL away): one answer lost
            # The attempt is over and its receipt handed in; an answer left out of the adaptive
            # window costs nothing that matters, an exception here would fail the task.
            logger.warning("recording the answer of %s failed", domain, exc_info=True)
        self.recorded = True

    def record_into(
        self,
        pipe: Any,
        *,
        http_status: int | None,
        retry_after_s: float | None,
        timed_out: bool = False,
        answered_url: str | None = None,
    ) -> None:
        """``record`` queued on the caller's pipeline, so that it rides in the round trip that
        hands in the receipt, when the answering host's limits are in this process's cache;
        otherwise (e.g. after a redirect to another host) nothing is queued and a later
        ``record`` does it."""
        try:
            self.recorded = domain_outcome_record_into(
                pipe,
                domain=self._answering_domain(answered_url),
                http_status=http_status,
                retry_after_s=retry_after_s,
                timed_out=timed_out,
            )
        except Exception:  # noqa: BLE001 - a bug here must not cost the receipt: ``record`` logs it
            pass

    def _answering_domain(self, answered_url: str | None) -> str:
        return (urlsplit(answered_url).hostname if answered_url else None) or self.domain

    def release_into(self, pipe: Any) -> None:
        """Queue the slot's release on ``pipe``; the turn's exit then releases nothing more. If
        the pipeline never runs, the slot expires by itself (its TTL, see ``job_domain_turn``)."""
        pipe.zrem(domain_keys(self.group).slots, self.holder)
        self.released = True


@contextmanager
def job_domain_turn(
    *,
    job_id: uuid.UUID | str,
    domain: str | None = None,
    timeout_s: int | None = None,
    share: LineShare = DEFAULT_SHARE,
) -> Iterator[DomainTurn | None]:
    """The worker's gate, before the claim: yields a ``DomainTurn`` when the job may contact its
    domain now, and releases the concurrency slot on exit, whatever happens inside. Yields None
    when the job is not to run now: refused by its domain, in which case it is already deferred in
    the database, or (when the caller does not know the job's domain) not claimable.

    ``domain`` and ``timeout_s`` come in the broker message (the publisher read them with the
    row): with them the gate reads nothing from PostgreSQL. A duplicate message then spends a
    token before its claim fails, which costs the domain one request's worth of rate, once, in the
    rare case of a redelivery; without them (a message from before they were sent) the job's row
    is read first, as it always was. ``share``: the job's place in the domain's line (its
    priority, tenant and weight, also from the message)."""
    if domain is None or timeout_s is None:
        job = job_runnable_get(job_id=job_id)
        if job is None:
            yield None
            return
        domain, timeout_s = job.domain, job.timeout_s
    holder = f"{job_id}:{secrets.token_hex(4)}"
    # The slot outlives any live fetch of this job (its timeout bounds the whole fetch) by one
    # lease: past that, its holder is surely dead and the slot frees itself.
    slot_ttl_s = timeout_s + settings.SCRAPEJOBS_LEASE_S
    try:
        decision = domain_permit_acquire(
            domain=domain, holder=holder, ticket=str(job_id), slot_ttl_s=slot_ttl_s, share=share
        )
    except redis.RedisError:
        logger.warning(
            "politeness state unavailable; job %s waits %ss", job_id, UNAVAILABLE_DEFER_S, exc_info=True
        )
        decision = DomainDecision(granted=False, wait_s=UNAVAILABLE_DEFER_S, reason="unavailable")
    if not decision.granted:
        deferred = job_defer_for_domain(
            job_id=job_id, wait_s=decision.wait_s, reason=waiting_for_domain_refusal(decision.reason)
        )
        logger.debug(
            "job %s refused by %s (%s): %s for %.2fs",
            job_id,
            domain,
            decision.reason,
            "deferred" if deferred else "not deferred (changed meanwhile)",
            decision.wait_s,
        )
        yield None
        return
    turn = DomainTurn(domain=domain, holder=holder, group=decision.group)
    try:
        yield turn
    finally:
        if not turn.released:
            try:
                domain_permit_release(domain=decision.group, holder=holder)
            except redis.RedisError:
                logger.warning("releasing a slot of %s failed; it expires by itself", domain, exc_info=True)
