"""One attempt at a job, from claim to receipt (NFR-1-3.5).

``job_run_attempt`` claims the job with a conditional update (a duplicate message gets None and
does nothing), then, outside any transaction, fetches the URL through the guarded fetcher and
streams the body into storage while the lease keeper renews the lease; between chunks it stops
on a cancel (Redis flag) or a lost lease. Whatever happens it hands exactly one ``AttemptFinished``
receipt to ``receipt_submit``; ``succeeded`` only once the body is stored, with size and SHA-256.
Whether a failure is retried is the fold's decision (apps.jobs.lifecycle.plan_after_attempt):
temporary failures go back to ``queued`` while attempts remain.

This module owns the attempt's two ends: the claim (single-flight decision, the domain's turn,
the conditional update) and the receipt's delivery with the answer for the domain's adaptive
rate. What runs between them, under the lease, is ``apps.scraping.fetch_and_store``'s.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

import redis

from apps import tracing
from apps.db_failures import database_failure
from apps.jobs import models as job_models
from apps.jobs.claims import ClaimedJob, job_claim
from apps.jobs.fetch_keys import job_fetch_key
from apps.jobs.models import AttemptOutcome
from apps.jobs.receipts import AttemptFinished
from apps.jobs.singleflight import FetchDecision, job_fetch_decide
from apps.outbound.proxy_status import egress_proxy_auth_failed_record
from apps.politeness.limiter import DEFAULT_SHARE, LineShare
from apps.redis_clients import state_redis
from apps.runtime.logs import job_attempt_failure_log, job_log_context_claimed
from apps.scraping.domain_turn import DomainTurn, job_domain_turn
from apps.scraping.fetch_and_store import claimed_attempt_fetch_and_store, connection_release, untraced
from apps.tracing import traceparent_current, tracing_on
from apps.writer.submit import receipt_submit

logger = logging.getLogger(__name__)

# Endings that are no answer of the URL's to tell its domain: decided by the origin's robots.txt
# before any request to it, or a redirect hop deferred before its request.
NOT_ANSWERS = frozenset({"robots_unavailable", "robots_disallowed", "redirect_deferred"})


class ClaimUndecided(Exception):
    """Whether this message's job runs now could not be decided (the database or the politeness
    state could not be asked, or the deferral could not be written): nothing was claimed, so the
    message must be delivered again (``apps.scraping.tasks``), never dropped."""


def job_run_attempt(
    *,
    job_id: uuid.UUID | str,
    worker: str,
    domain: str | None = None,
    timeout_s: int | None = None,
    trace_context: str | None = None,
    max_age_s: int | None = None,
    share: LineShare = DEFAULT_SHARE,
) -> AttemptFinished | None:
    """Claim ``job_id`` and run one attempt; None when the claim is not ours (duplicate message,
    job final or cancelled, or its retry time not yet come: then it is deferred, see
    ``job_claim``), its domain said wait (deferred), or it needs no fetch of its own: an identical
    request's young result served it, or it waits parked for an identical request's fetch
    (single-flight, ``job_fetch_decide``: decided first, so neither asks the domain for a turn). Raises ``ClaimUndecided`` when that could
    not be decided (the database is unreachable): the message must then be delivered again.

    ``domain`` and ``timeout_s`` are the job's, sent in the broker message by the publisher, so
    that the politeness gate needs no read of the row (``job_domain_turn``).

    ``max_age_s``: the job's, sent by the publisher when it is 0 (it never changes after
    intake). Such a job takes no stored result and never waits for another's fetch, so there is
    nothing to decide: it is claimed without the single-flight read, the claim returns what its
    fetch key is made of, and the key goes to the fold with the stored body (FR-15: a later
    job with ``max_age_s`` > 0 can still be served it). None (an older publisher's message): the
    decision reads the job as for any other.

    What the attempt costs the shared services: PostgreSQL once for a job with ``max_age_s`` 0
    (the claim, one statement), else twice, the single-flight read first (one statement; with
    ``max_age_s`` > 0 one short transaction more); its connection goes back to the pool before
    the fetch, so a fetch of any length holds no database connection and the number of fetches
    in flight is set by the worker's threads alone; Redis twice: the gate's script before the
    claim and one pipeline after the fetch (slot release, the answer for the adaptive rate,
    receipt, nudges). A cancel is seen by the claim, which refuses a job whose cancel was
    requested, and after it by the lease keeper's watcher (tests/scraping/test_attempts.py).

    ``share``: the job's priority, tenant and weight, from the message: its place in its
    domain's line, and in a redirect hop's (NFR-9, NFR-10 at the gate).

    ``trace_context``: the traceparent the publisher sent (FR-29, docs/tracing.md); the attempt
    is then a ``job.attempt`` span of the job's trace, its steps spans inside it. None (tracing
    off, or a job without a trace): nothing of the kind is made."""
    if trace_context is None or not tracing_on():
        return _attempt_claim_and_run(
            job_id=job_id, worker=worker, domain=domain, timeout_s=timeout_s, max_age_s=max_age_s, share=share
        )
    return _attempt_traced(
        job_id=job_id,
        worker=worker,
        domain=domain,
        timeout_s=timeout_s,
        trace_context=trace_context,
        max_age_s=max_age_s,
        share=share,
    )


def _attempt_traced(
    *,
    job_id: uuid.UUID | str,
    worker: str,
    domain: str | None,
    timeout_s: int | None,
    trace_context: str,
    max_age_s: int | None,
    share: LineShare,
) -> AttemptFinished | None:
    """The attempt as a ``job.attempt`` span of the job's trace (FR-29), its ending on the span."""
    with tracing.span(
        "job.attempt", parent=trace_context, attributes={"scrapejobs.job_id": str(job_id)}
    ) as attempt:
        receipt = _attempt_claim_and_run(
            job_id=job_id,
            worker=worker,
            domain=domain,
            timeout_s=timeout_s,
            max_age_s=max_age_s,
            attempt_span=traceparent_current(),
            share=share,
        )
        if receipt is not None:
            tracing.span_set(
                attempt,
                **{
                    "scrapejobs.attempt": receipt.attempt,
                    "scrapejobs.outcome": receipt.outcome,
                    "scrapejobs.error_class": receipt.error_class,
                },
            )
        return receipt


def _attempt_claim_and_run(
    *,
    job_id: uuid.UUID | str,
    worker: str,
    domain: str | None,
    timeout_s: int | None,
    max_age_s: int | None = None,
    attempt_span: str | None = None,
    share: LineShare = DEFAULT_SHARE,
) -> AttemptFinished | None:
    """``job_run_attempt``'s work; ``attempt_span``: the traceparent of the attempt span this
    runs in (FR-29), each step then a span inside it, and the receipt carrying it."""
    traced = attempt_span is not None
    step = tracing.span if traced else untraced
    # Politeness (NFR-5, apps.politeness): the job's domain must grant a token and a concurrency
    # slot BEFORE the claim, so that waiting spends no attempt. A refused job is already deferred
    # in the database when the turn is None (not held in this thread: the worker slot is free at
    # once); the slot is released when the block ends, whatever happens in it, or with the receipt.
    with ExitStack() as held:
        taken = _claim(
            held,
            step=step,
            job_id=job_id,
            worker=worker,
            domain=domain,
            timeout_s=timeout_s,
            max_age_s=max_age_s,
            share=share,
        )
        if taken is None:
            return None
        decision, turn, claimed = taken
        job_log_context_claimed(tenant_id=claimed.tenant_id, attempt=claimed.attempt, url=claimed.url)
        receipt = claimed_attempt_fetch_and_store(
            claimed=claimed,
            worker=worker,
            traced=traced,
            fetch_key=decision.key or _claimed_fetch_key(claimed),
            share=share,
        )
        return _receipt_deliver(receipt, claimed=claimed, turn=turn, step=step, attempt_span=attempt_span)


def _claim(
    held: ExitStack,
    *,
    step: Callable[..., Any],
    job_id: uuid.UUID | str,
    worker: str,
    domain: str | None,
    timeout_s: int | None,
    max_age_s: int | None,
    share: LineShare,
) -> tuple[FetchDecision, DomainTurn, ClaimedJob] | None:
    """Decide, take the domain's turn (held on ``held``) and claim; None when the job is not to
    run here now (see ``job_run_attempt``)."""
    # Up to the claim, a failure leaves the job published with nobody holding it: it raises
    # ClaimUndecided and the task has the message delivered again. The
    # turn's slot, if one was granted, is released by the stack either way.
    try:
        # FR-15: a job that takes no stored result always fetches (see job_run_attempt).
        decision = FetchDecision("fetch") if max_age_s == 0 else job_fetch_decide(job_id=job_id)
        if decision.kind != "fetch":
            logger.info("job %s %s by single-flight: no fetch of its own", job_id, decision.kind)
            return None
        with step("job.politeness_wait", attributes={"scrapejobs.domain": domain or ""}) as waited:
            turn = held.enter_context(
                job_domain_turn(job_id=job_id, domain=domain, timeout_s=timeout_s, share=share)
            )
            tracing.span_set(waited, **{"scrapejobs.granted": turn is not None})
        if turn is None:
            return None
        with step("job.claim") as claim:
            claimed = job_claim(job_id=job_id, worker=worker, fetch_key=decision.key)
            tracing.span_set(claim, **{"scrapejobs.claimed": claimed is not None})
    except Exception as e:
        # Only what says a dependency was away or busy (Redis, PostgreSQL): a bad message (a
        # job id that is no UUID) or a bug fails the task, logged, not sent again 20 times.
        if isinstance(e, redis.RedisError) or database_failure(e) is not None:
            raise ClaimUndecided(f"job {job_id}: {type(e).__name__}: {e}") from e
        raise
    finally:
        connection_release()
    if claimed is None:
        logger.info("job %s not claimable (duplicate message or not queued): skipped", job_id)
        return None
    return decision, turn, claimed


def _receipt_deliver(
    receipt: AttemptFinished,
    *,
    claimed: ClaimedJob,
    turn: DomainTurn,
    step: Callable[..., Any],
    attempt_span: str | None,
) -> AttemptFinished:
    """Hand the receipt to the writer, the domain's slot back and its answer to the adaptive rate.

    One round trip: the slot goes back, the answer moves the domain's adaptive rate, the receipt
    goes to the writer, and the publisher is asked to refill the broker for the worker slot this
    frees. First, before anything that may read the database: once the attempt's lease hold has
    ended no lease mark says this worker is alive, and only the receipt waiting in the stream
    keeps the sweeper off the job. (Recording the answer first read the domain's policy, which
    waited 30 s for the connection pool while PostgreSQL was away, or failed at once without it
    and lost the receipt: the finished fetch was swept ``lost`` and done again, NFR-3. The
    answer rides along only when the policy is in this process's cache; else it is recorded
    after the receipt, below.)"""
    answer = _answer_of(receipt, claimed=claimed)

    def end_of_attempt(pipe: Any) -> None:
        turn.release_into(pipe)
        if answer is not None:
            turn.record_into(pipe, **answer)

    with step("job.receipt"):
        if attempt_span is not None:  # the writer's fold links to the attempt span (the receipt's last field)
            receipt = replace(receipt, trace_context=attempt_span)
        receipt_submit(receipt, also=end_of_attempt, nudge_publisher=True)
    if receipt.outcome in (AttemptOutcome.PERMANENT, AttemptOutcome.TEMPORARY):
        job_attempt_failure_log(logger, error_class=receipt.error_class, error=receipt.error)
    if answer is not None:
        turn.record(**answer)  # nothing when it rode in the receipt's round trip
    if receipt.error_class == "proxy_auth":
        _proxy_auth_failure_record(receipt.error or "")
    return receipt


def _answer_of(receipt: AttemptFinished, *, claimed: ClaimedJob) -> dict[str, Any] | None:
    """What the attempt tells its domain's adaptive rate; None when it tells nothing.

    Every answer moves the adaptive rate of the domain that gave it (429/503 and timeouts lower
    it: after a redirect, the host redirected to); a Retry-After pauses that domain for every
    worker. A robots.txt verdict is no answer of the URL's: its pause (a file that could not be
    had) is the origin's own, held by the origin's cached copy (apps.politeness.robots), and must
    not pause the host's other ports (NFR-23). The egress proxy's failures say nothing of the
    target either (FR-28), nor does a timeout shorter than the default one: that is the job's own
    impatience, and one tenant's timeout_s=1 against a site that answers in 2 s must not slow the
    site for everyone."""
    own_timeout = receipt.error_class == "timeout" and claimed.timeout_s < job_models.JOB_TIMEOUT_DEFAULT_S
    if receipt.error_class in NOT_ANSWERS or receipt.error_class in PROXY_ERROR_CLASSES or own_timeout:
        return None
    return {
        "http_status": receipt.http_status,
        "retry_after_s": receipt.retry_after_s,
        "timed_out": receipt.error_class == "timeout",
        "answered_url": receipt.answered_url,
    }


def _claimed_fetch_key(claimed: ClaimedJob) -> str | None:
    """The fetch key of a job claimed without a decision, from what the claim returned; None
    when the claim did not read the tenant's switches."""
    if claimed.share_fetches is None or claimed.obey_robots is None or claimed.tenant_id is None:
        return None
    return job_fetch_key(
        method=claimed.method,
        url=claimed.url,
        headers=claimed.headers,
        body=claimed.body,
        render=claimed.render,
        browser_options=claimed.browser_options,
        tenant_id=claimed.tenant_id,
        share_fetches=claimed.share_fetches,
        obey_robots=claimed.obey_robots,
    )


PROXY_ERROR_CLASSES = frozenset({"proxy_error", "proxy_auth"})


def _proxy_auth_failure_record(error: str) -> None:
    try:
        egress_proxy_auth_failed_record(r=state_redis(), error=error)
    except redis.RedisError:
        logger.warning("could not record the egress proxy's 407 for /readyz", exc_info=True)
