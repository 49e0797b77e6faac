"""A claimed attempt's work under its lease (NFR-1-3.5): the request made from the claimed job,
the fetch (plain, or rendered: apps/scraping/render.py) streamed into storage, the checks that
stop it on a cancel or a lost lease, and the one ``AttemptFinished`` receipt every ending becomes.

The claim before it and the receipt's delivery after it are ``apps.scraping.attempt``'s.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection

from apps import tracing
from apps.db_failures import database_failure
from apps.jobs.claims import ClaimedJob
from apps.jobs.models import AttemptOutcome, Render
from apps.jobs.receipts import AttemptFinished, ResultStored
from apps.jobs.revalidation import PreviousSuccess
from apps.politeness.limiter import DEFAULT_SHARE, LineShare
from apps.politeness.selectors import tenant_obeys_robots
from apps.results.storage import ResultStoreFailed, result_store
from apps.scraping.errors import FetchError
from apps.scraping.fetch import FetchRequest, fetch_open
from apps.scraping.fetched import Fetched
from apps.scraping.leases import LeaseHandle, lease_keeper
from apps.scraping.redirect_hops import RedirectDeferred
from apps.scraping.refetch import compared, conditional, kept, previous_success_for
from apps.scraping.render import render_and_store

logger = logging.getLogger(__name__)

# Makes the attempt's receipt from its outcome and the receipt's other fields.
Finish = Callable[..., AttemptFinished]


class AttemptStopped(Exception):
    """The attempt was stopped from outside: ``cancelled`` or ``lease_lost``."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _Fetched(NamedTuple):
    """A plain fetch's stored body, the URL that answered, and the previous success to compare
    it with (FR-34)."""

    result: ResultStored
    answered_url: str
    previous: PreviousSuccess | None


@contextmanager
def untraced(name: str, **_: Any) -> Iterator[None]:
    """``tracing.span``'s stand-in for an attempt that is not traced: no span."""
    yield None


def connection_release() -> None:
    """Give this thread's database connection back to the pool (Django keeps one per thread
    until the task ends otherwise: a 500 ms fetch would hold it for 500 ms, and a pool of 20
    would cap a worker at 20 fetches in flight). Inside an atomic block (tests wrap each test in
    one) the connection must stay: closing it would break the block."""
    if not connection.in_atomic_block:
        connection.close()


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
    step = tracing.span if traced else untraced
    started = time.monotonic()
    finished = _finisher(claimed=claimed, worker=worker, started=started)
    # The fetch ends by timeout_s; storing the body gets the allowance on top. Past this the
    # upload is given up and the lease no longer renewed.
    deadline = started + claimed.timeout_s + settings.SCRAPEJOBS_STORAGE_ALLOWANCE_S
    try:
        with lease_keeper().hold(
            job_id=claimed.id, attempt=claimed.attempt, worker=worker, renew_until=deadline
        ) as lease:
            done = _under_lease(
                claimed,
                lease=lease,
                step=step,
                obey_robots=obey_robots,
                share=share,
                deadline=deadline,
                fetch_key=fetch_key,
                finished=finished,
            )
        if isinstance(done, AttemptFinished):  # rendered, or a 304: ended under the lease
            return done
        stored = done.result
        if done.answered_url and done.answered_url != claimed.url:
            # Redirected: the job's representation names the URL that answered (FR-25); a plain
            # job's receipt carries a null there (5 bytes), not its URL again.
            stored = dataclasses.replace(stored, final_url=done.answered_url)
        return finished(
            AttemptOutcome.SUCCEEDED,
            http_status=stored.http_status,
            result=compared(claimed, stored, done.previous),
            answered_url=done.answered_url,
        )
    except (FetchError, RedirectDeferred, AttemptStopped, ResultStoreFailed) as e:
        return _ended_early(e, claimed=claimed, finished=finished)
    except Exception as e:  # noqa: BLE001 - a bug must still end the attempt with a receipt
        logger.exception("attempt %s of job %s crashed", claimed.attempt, claimed.id)
        return finished(
            AttemptOutcome.TEMPORARY, error_class="internal_error", error=f"{type(e).__name__}: {e}"
        )


def _finisher(*, claimed: ClaimedJob, worker: str, started: float) -> Finish:
    """The attempt's receipt maker: the job, attempt and worker, and the time since ``started``."""

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

    return finished


def _under_lease(
    claimed: ClaimedJob,
    *,
    lease: LeaseHandle,
    step: Callable[..., Any],
    obey_robots: bool | None,
    share: LineShare,
    deadline: float,
    fetch_key: str | None,
    finished: Finish,
) -> AttemptFinished | _Fetched:
    """The attempt's reads and fetch under the lease: the receipt of a rendered attempt or of a
    304 that kept the previous body, else the plain fetch's stored body."""
    obey = _robots_obeyed(claimed) if obey_robots is None else obey_robots
    request = _fetch_request(claimed, obey=obey, share=share)
    check = _stop_check(lease=lease)
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
            result=compared(claimed, dataclasses.replace(rendered.stored, fetch_key=fetch_key), previous),
            answered_url=rendered.answered_url,
            subrequests_made=rendered.subrequests_made,
            subrequests_blocked=rendered.subrequests_blocked,
        )
    request = conditional(claimed, request, previous)
    with (
        _fetch_step(step, url=claimed.url) as fetch,
        fetch_open(request=request, check=check, interrupt=lease.interrupt) as fetched,
    ):
        tracing.span_set(fetch, **{"http.response.status_code": fetched.status})
        if fetched.status == 304 and previous is not None:
            # Not Modified (FR-33): the previous success's body is this job's result; nothing is
            # stored. The (empty) body is read so the connection is reused.
            for _ in fetched.chunks():
                pass
            return finished(
                AttemptOutcome.SUCCEEDED,
                http_status=304,
                result=kept(previous, fetch_key=fetch_key),
                answered_url=fetched.url,
            )
        stored = _upload(claimed, fetched=fetched, step=step, deadline=deadline, fetch_key=fetch_key)
        tracing.span_set(fetch, **{"scrapejobs.bytes": stored.size})
        return _Fetched(stored, fetched.url, previous)


def _upload(
    claimed: ClaimedJob, *, fetched: Fetched, step: Callable[..., Any], deadline: float, fetch_key: str | None
) -> ResultStored:
    """The body streamed from the fetch into storage: the upload is inside the fetch."""
    with step("job.upload"):
        stored = result_store(
            job_id=claimed.id,
            attempt=claimed.attempt,
            chunks=fetched.chunks(),
            content_type=fetched.content_type,
            http_status=fetched.status,
            deadline=deadline,
        )
    return dataclasses.replace(stored, headers=fetched.headers, fetch_key=fetch_key)


def _fetch_request(claimed: ClaimedJob, *, obey: bool, share: LineShare) -> FetchRequest:
    """The request the claimed job asks for."""
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


def _ended_early(e: Exception, *, claimed: ClaimedJob, finished: Finish) -> AttemptFinished:
    """The receipt of an attempt that ended before a success: a failed fetch, a deferred
    redirect hop, a stop from outside, or storage that failed."""
    if isinstance(e, FetchError):
        return finished(
            AttemptOutcome.PERMANENT if e.permanent else AttemptOutcome.TEMPORARY,
            error_class=e.error_class,
            error=e.message,
            http_status=e.http_status,
            retry_after_s=e.retry_after_s,
            answered_url=e.url,
        )
    if isinstance(e, RedirectDeferred):
        # Not a failure and not counted (NFR-24): the fold requeues the job for exactly the hop
        # domain's wait, and its next attempt starts from its own URL (or, for a hop within the
        # group it held, from that hop: apps/scraping/redirect_hops.py).
        return finished(
            AttemptOutcome.DEFERRED, error_class="redirect_deferred", error=str(e), retry_after_s=e.wait_s
        )
    if isinstance(e, AttemptStopped):
        if e.reason == "cancelled":
            return finished(
                AttemptOutcome.CANCELLED, error_class="cancelled", error="cancelled while running"
            )
        return finished(
            AttemptOutcome.TEMPORARY,
            error_class="lease_lost",
            error="the lease expired and the job was taken again; this attempt stopped",
        )
    logger.warning("storing the result of job %s failed", claimed.id, exc_info=True)
    return finished(AttemptOutcome.TEMPORARY, error_class="storage_error", error=str(e))


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
        connection_release()


def _previous_success(claimed: ClaimedJob, *, fetch_key: str | None) -> PreviousSuccess | None:
    """``previous_success_for`` (apps/scraping/refetch.py), the connection then given back to the
    pool before the fetch, as after every read here."""
    try:
        return previous_success_for(claimed, fetch_key=fetch_key)
    finally:
        connection_release()


def _stop_check(*, lease: LeaseHandle) -> Callable[[], None]:
    """The check the fetch calls before each hop and chunk: raises ``AttemptStopped`` once the
    lease is lost or the job is cancelled.

    It asks nobody: the lease keeper's watcher asks for the cancel flags of every held job in one
    round trip every ``CANCEL_WATCH_INTERVAL_S``, sets ``lease.cancelled`` and breaks off any read
    in progress. A cancel requested before the claim is the claim's to see (it takes no job whose
    cancel was requested); one that lands in the millisecond between the claim and the fetch is
    seen by the watcher, within half a second, like one that lands during the fetch. A poll of
    Redis per fetch cost a round trip for every job (NFR-11) to learn that sooner."""

    def check() -> None:
        if lease.lost.is_set():
            raise AttemptStopped("lease_lost")
        if lease.cancelled.is_set():  # seen by the lease keeper's watcher
            raise AttemptStopped("cancelled")

    return check
