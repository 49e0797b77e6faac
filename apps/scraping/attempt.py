"""One attempt at a job, from claim to receipt (NFR-1-3.5).

``job_run_attempt`` claims the job with a conditional update (a duplicate message gets None and
does nothing), then, outside any transaction, fetches the URL through the guarded fetcher and
streams the body into storage while the lease keeper renews the lease; between chunks it stops
on a cancel (Redis flag) or a lost lease. Whatever happens it hands exactly one ``AttemptFinished``
receipt to ``receipt_submit``; ``succeeded`` only once the body is stored, with size and SHA-256.
Whether a failure is retried is the fold's decision (apps.jobs.lifecycle.plan_after_attempt):
temporary failures go back to ``queued`` while attempts remain.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.db import connection

from apps import tracing
from apps.db_failures import database_failure
from apps.jobs import models as job_models
from apps.jobs.claims import ClaimedJob, job_claim
from apps.jobs.models import AttemptOutcome, Render
from apps.jobs.receipts import AttemptFinished
from apps.jobs.revalidation import PreviousSuccess
from apps.jobs.singleflight import FetchDecision, job_fetch_decide, job_fetch_key
from apps.outbound.proxy_status import egress_proxy_auth_failed_record
from apps.politeness.limiter import DEFAULT_SHARE, LineShare
from apps.politeness.selectors import tenant_obeys_robots
from apps.redis_clients import cancel_flag_key, state_redis
from apps.results.storage import ResultStoreFailed, result_store
from apps.runtime.logs import job_attempt_failure_log, job_log_context_claimed
from apps.scraping.domain_turn import job_domain_turn
from apps.scraping.errors import FetchError
from apps.scraping.fetch import FetchRequest, RedirectDeferred, fetch_open
from apps.scraping.leases import LeaseHandle, lease_keeper
from apps.scraping.refetch import compared, conditional, kept, previous_success_for
from apps.scraping.render import render_and_store
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


class AttemptStopped(Exception):
    """The attempt was stopped from outside: ``cancelled`` or ``lease_lost``."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


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
    in flight is set by the worker's threads alone; Redis three times: the gate's script before
    the claim, one cancel check as the fetch starts, and one pipeline after it (slot release,
    the answer for the adaptive rate, receipt, nudges).

    ``share``: the job's priority, tenant and weight, from the message: its place in its
    domain's line, and in a redirect hop's (NFR-9, NFR-10 at the gate).

    ``trace_context``: the traceparent the publisher sent (FR-29, docs/tracing.md); the attempt
    is then a ``job.attempt`` span of the job's trace, its steps spans inside it. None (tracing
    off, or a job without a trace): nothing of the kind is made."""
    if trace_context is None or not tracing_on():
        return _attempt_claim_and_run(
            job_id=job_id, worker=worker, domain=domain, timeout_s=timeout_s, max_age_s=max_age_s, share=share
        )
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
    step = tracing.span if traced else _untraced
    # Politeness (NFR-5, apps.politeness): the job's domain must grant a token and a concurrency
    # slot BEFORE the claim, so that waiting spends no attempt. A refused job is already deferred
    # in the database when the turn is None (not held in this thread: the worker slot is free at
    # once); the slot is released when the block ends, whatever happens in it, or with the receipt.
    with ExitStack() as held:
        # Up to the claim, a failure leaves the job published with nobody holding it: it raises
        # ClaimUndecided and the task has the message delivered again. The
        # turn's slot, if one was granted, is released by the stack either way.
        try:
            # FR-15: a job that takes no stored result always fetches (see the docstring).
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
            _connection_release()
        if claimed is None:
            logger.info("job %s not claimable (duplicate message or not queued): skipped", job_id)
            return None
        job_log_context_claimed(tenant_id=claimed.tenant_id, attempt=claimed.attempt, url=claimed.url)
        receipt = claimed_attempt_fetch_and_store(
            claimed=claimed,
            worker=worker,
            traced=traced,
            fetch_key=decision.key or _claimed_fetch_key(claimed),
            share=share,
        )
        # One round trip: the slot goes back, the answer moves the domain's adaptive rate, the
        # receipt goes to the writer, and the publisher is asked to refill the broker for the
        # worker slot this frees. First, before anything that may read the database: once the
        # attempt's lease hold has ended no lease mark says this worker is alive, and only the
        # receipt waiting in the stream keeps the sweeper off the job. (Recording the answer first
        # read the domain's policy, which waited 30 s for the connection pool while PostgreSQL was
        # away, or failed at once without it and lost the receipt: the finished fetch was swept
        # ``lost`` and done again, NFR-3. The answer rides along only when the policy is in this
        # process's cache; else it is recorded after the receipt, below.)
        #
        # Every answer moves the adaptive rate of the domain that gave it (429/503 and timeouts
        # lower it: after a redirect, the host redirected to); a Retry-After pauses that domain
        # for every worker. A robots.txt verdict is no answer of the URL's: its pause (a file
        # that could not be had) is the origin's own, held by the origin's cached copy
        # (apps.politeness.robots), and must not pause the host's other ports (NFR-23). The
        # egress proxy's failures say nothing of the target either (FR-28), nor does a timeout
        # shorter than the default one: that is the job's own impatience, and one tenant's
        # timeout_s=1 against a site that answers in 2 s must not slow the site for everyone.
        own_timeout = (
            receipt.error_class == "timeout" and claimed.timeout_s < job_models.JOB_TIMEOUT_DEFAULT_S
        )
        answer: dict[str, Any] | None = (
            {
                "http_status": receipt.http_status,
                "retry_after_s": receipt.retry_after_s,
                "timed_out": receipt.error_class == "timeout",
                "answered_url": receipt.answered_url,
            }
            if receipt.error_class not in NOT_ANSWERS
            and receipt.error_class not in PROXY_ERROR_CLASSES
            and not own_timeout
            else None
        )

        def end_of_attempt(pipe: Any) -> None:
            turn.release_into(pipe)
            if answer is not None:
                turn.record_into(pipe, **answer)

        with step("job.receipt"):
            if traced:  # the writer's fold links to the attempt span (the receipt's last field)
                receipt = replace(receipt, trace_context=attempt_span)
            receipt_submit(receipt, also=end_of_attempt, nudge_publisher=True)
        if receipt.outcome in (AttemptOutcome.PERMANENT, AttemptOutcome.TEMPORARY):
            job_attempt_failure_log(logger, error_class=receipt.error_class, error=receipt.error)
        if answer is not None:
            turn.record(**answer)  # nothing when it rode in the receipt's round trip
        if receipt.error_class == "proxy_auth":
            _proxy_auth_failure_record(receipt.error or "")
    return receipt


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


@contextmanager
def _untraced(name: str, **_: Any) -> Iterator[None]:
    yield None


@contextmanager
def _fetch_step(step: Callable[..., Any], *, url: str) -> Iterator[Any]:
    """The fetch's span: the target host, and the status (also of an answer that failed it)."""
    with step("job.fetch", attributes={"server.address": urlsplit(url).hostname or ""}) as span:
        try:
            yield span
        except FetchError as e:
            tracing.span_set(
                span, **{"http.response.status_code": e.http_status, "error.type": e.error_class}
            )
            raise


PROXY_ERROR_CLASSES = frozenset({"proxy_error", "proxy_auth"})


def _proxy_auth_failure_record(error: str) -> None:
    try:
        egress_proxy_auth_failed_record(r=state_redis(), error=error)
    except redis.RedisError:
        logger.warning("could not record the egress proxy's 407 for /readyz", exc_info=True)


def _connection_release() -> None:
    """Give this thread's database connection back to the pool (Django keeps one per thread
    until the task ends otherwise: a 500 ms fetch would hold it for 500 ms, and a pool of 20
    would cap a worker at 20 fetches in flight). Inside an atomic block (tests wrap each test in
    one) the connection must stay: closing it would break the block."""
    if not connection.in_atomic_block:
        connection.close()


def _robots_obeyed(claimed: ClaimedJob) -> bool:
    """Whether this attempt reads robots.txt: the setting, then the tenant's switch (as the
    claim read it with the job; for a claim that did not, a cached read of its row). Asked before the fetch, and the connection given back at once, so that the
    fetch still holds none; a database that cannot answer means obey, the safe side."""
    if not settings.SCRAPEJOBS_ROBOTS_OBEY:
        return False
    if claimed.obey_robots is not None:  # the claim read the tenant's switch with the job
        return claimed.obey_robots
    try:
        return tenant_obeys_robots(tenant_id=claimed.tenant_id)
    except Exception as e:
        if database_failure(e) is None:
            raise
        logger.warning("job %s: tenant's robots.txt switch unreadable; obeying", claimed.id)
        return True
    finally:
        _connection_release()


def claimed_attempt_fetch_and_store(
    *,
    claimed: ClaimedJob,
    worker: str,
    obey_robots: bool | None = None,
    traced: bool = False,
    fetch_key: str | None = None,
    share: LineShare = DEFAULT_SHARE,
) -> AttemptFinished:
    """Fetch and store; never raises: every outcome, a bug included, becomes the receipt.
    ``obey_robots`` None: looked up here (``_robots_obeyed``), under the lease. ``traced``: the
    fetch and the upload are spans (FR-29). ``fetch_key``: the job's (apps.jobs.singleflight),
    carried with a stored body for the fold to store with the success.

    Everything after the claim runs under the lease keeper's hold, the database read of the
    tenant's robots.txt switch included: that read can wait for the connection pool (30 s) when
    PostgreSQL is away, and before the hold no lease mark says in Redis that this worker is alive
    (NFR-3, NFR-4)."""
    step = tracing.span if traced else _untraced
    started = time.monotonic()

    def finished(outcome: str, **kw: Any) -> AttemptFinished:
        return AttemptFinished(
            job_id=str(claimed.id),
            attempt=claimed.attempt,
            outcome=outcome,
            finished_at=time.time(),
            duration_ms=int((time.monotonic() - started) * 1000),
            worker=worker,
            deferred_before=claimed.deferred_attempts,
            **kw,
        )

    def request_for(obey: bool) -> FetchRequest:
        return FetchRequest(
            method=claimed.method,
            url=claimed.url,
            headers=dict(claimed.headers),
            body=claimed.body,
            timeout_s=float(claimed.timeout_s),
            obey_robots=obey,
            charge_redirects=True,
            ticket=str(claimed.id),
            share=share,
            # Only a job deferred before may have a redirect hop to go on from: a plain job's
            # fetch asks Redis nothing more.
            resumable=claimed.deferred_attempts > 0,
        )

    # The fetch ends by timeout_s; storing the body gets the allowance on top. Past this the
    # upload is given up and the lease no longer renewed.
    deadline = started + claimed.timeout_s + settings.SCRAPEJOBS_STORAGE_ALLOWANCE_S
    try:
        with lease_keeper().hold(
            job_id=claimed.id, attempt=claimed.attempt, worker=worker, renew_until=deadline
        ) as lease:
            request = request_for(_robots_obeyed(claimed) if obey_robots is None else obey_robots)
            check = _stop_check(job_id=str(claimed.id), attempt=claimed.attempt, lease=lease)
            previous = _previous_success(claimed, fetch_key=fetch_key)
            if claimed.render == Render.BROWSER:  # FR-30: apps/scraping/render.py
                rendered = render_and_store(
                    claimed=claimed,
                    request=request,
                    check=check,
                    interrupt=lease.interrupt,
                    store_deadline=deadline,
                )
                return finished(
                    AttemptOutcome.SUCCEEDED,
                    http_status=rendered.stored.http_status,
                    result=compared(
                        claimed, dataclasses.replace(rendered.stored, fetch_key=fetch_key), previous
                    ),
                    answered_url=rendered.answered_url,
                    subrequests_made=rendered.subrequests_made,
                    subrequests_blocked=rendered.subrequests_blocked,
                )
            request = conditional(claimed, request, previous)
            with (
                _fetch_step(step, url=claimed.url) as fetch,
                fetch_open(request=request, check=check, interrupt=lease.interrupt) as fetched,
            ):
                answered_url = fetched.url
                tracing.span_set(fetch, **{"http.response.status_code": fetched.status})
                if fetched.status == 304 and previous is not None:
                    # Not Modified (FR-33): the previous success's body is this job's result;
                    # nothing is stored. The (empty) body is read so the connection is reused.
                    for _ in fetched.chunks():
                        pass
                    return finished(
                        AttemptOutcome.SUCCEEDED,
                        http_status=304,
                        result=kept(previous, fetch_key=fetch_key),
                        answered_url=answered_url,
                    )
                # The body streams from the fetch into storage: the upload is inside the fetch.
                with step("job.upload"):
                    stored = result_store(
                        job_id=claimed.id,
                        attempt=claimed.attempt,
                        chunks=fetched.chunks(),
                        content_type=fetched.content_type,
                        http_status=fetched.status,
                        deadline=deadline,
                    )
                tracing.span_set(fetch, **{"scrapejobs.bytes": stored.size})
                stored = dataclasses.replace(stored, headers=fetched.headers, fetch_key=fetch_key)
        if answered_url and answered_url != claimed.url:
            # Redirected: the job's representation names the URL that answered (FR-25); a plain
            # job's receipt carries a null there (5 bytes), not its URL again.
            stored = dataclasses.replace(stored, final_url=answered_url)
        return finished(
            AttemptOutcome.SUCCEEDED,
            http_status=stored.http_status,
            result=compared(claimed, stored, previous),
            answered_url=answered_url,
        )
    except FetchError as e:
        return finished(
            AttemptOutcome.PERMANENT if e.permanent else AttemptOutcome.TEMPORARY,
            error_class=e.error_class,
            error=e.message,
            http_status=e.http_status,
            retry_after_s=e.retry_after_s,
            answered_url=e.url,
        )
    except RedirectDeferred as e:
        # Not a failure and not counted (NFR-24): the fold requeues the job for exactly the hop
        # domain's wait, and its next attempt starts from its own URL (or, for a hop within the
        # group it held, from that hop: apps/scraping/fetch.py).
        return finished(
            AttemptOutcome.DEFERRED, error_class="redirect_deferred", error=str(e), retry_after_s=e.wait_s
        )
    except AttemptStopped as e:
        if e.reason == "cancelled":
            return finished(
                AttemptOutcome.CANCELLED, error_class="cancelled", error="cancelled while running"
            )
        return finished(
            AttemptOutcome.TEMPORARY,
            error_class="lease_lost",
            error="the lease expired and the job was taken again; this attempt stopped",
        )
    except ResultStoreFailed as e:
        logger.warning("storing the result of job %s failed", claimed.id, exc_info=True)
        return finished(AttemptOutcome.TEMPORARY, error_class="storage_error", error=str(e))
    except Exception as e:  # noqa: BLE001 - a bug must still end the attempt with a receipt
        logger.exception("attempt %s of job %s crashed", claimed.attempt, claimed.id)
        return finished(
            AttemptOutcome.TEMPORARY, error_class="internal_error", error=f"{type(e).__name__}: {e}"
        )


def _previous_success(claimed: ClaimedJob, *, fetch_key: str | None) -> PreviousSuccess | None:
    """``previous_success_for`` (apps/scraping/refetch.py), the connection then given back to the
    pool before the fetch, as after every read here."""
    try:
        return previous_success_for(claimed, fetch_key=fetch_key)
    finally:
        _connection_release()


def _stop_check(*, job_id: str, attempt: int, lease: LeaseHandle) -> Callable[[], None]:
    """The check the fetch calls before each hop and chunk: raises ``AttemptStopped`` once the
    lease is lost or the job is cancelled.

    The first call asks Redis for the job's cancel flag (a cancel that came between the claim and
    the fetch stops it before the target is asked); after that the lease keeper's watcher, which
    asks for the flags of every held job in one round trip every ``CANCEL_WATCH_INTERVAL_S``, sets
    ``lease.cancelled`` and breaks off any read in progress. A poll of its own per fetch would
    cost a round trip per job every 0.25 s (a 500 ms fetch made two) to learn sooner
    than the watcher what the watcher learns within half a second."""
    polled = False
    key = cancel_flag_key(job_id, attempt)

    def check() -> None:
        nonlocal polled
        if lease.lost.is_set():
            raise AttemptStopped("lease_lost")
        if lease.cancelled.is_set():  # seen by the lease keeper's watcher
            raise AttemptStopped("cancelled")
        if polled:
            return
        polled = True
        try:
            cancelled = state_redis().exists(key)
        except Exception:  # noqa: BLE001 - Redis down: keep fetching, the watcher sees the cancel later
            logger.warning("cancel check for job %s failed", job_id, exc_info=True)
            return
        if cancelled:
            raise AttemptStopped("cancelled")

    return check
