"""The scrape task: one message per job, on the queue of its priority (``jobs.<priority>``).

Thin: the message carries the job id, and the job's domain and timeout for the politeness gate
(facts that never change after intake); ``job_run_attempt`` re-reads the job through its claim
and does nothing for a duplicate.

Acknowledged when it starts (``acks_late=False``), unlike the control tasks. So a task that
returns without a claim must leave the job either deferred in the outbox (``published_at``
cleared: the politeness gate, or a job not due yet by the database's clock, see ``job_claim``) or
with a new message: when the claim cannot be decided (the database is unreachable,
``ClaimUndecided``) the task sends its message again (a Celery retry) after a short pause, instead
of letting the job sit published for ``SCRAPEJOBS_REPUBLISH_AFTER_S``. Only a
worker that dies before its claim (or a retry that cannot be sent: the broker is down too) leaves
that to the sweeper, which publishes the job again after those 5 minutes; after its claim the
lease brings it back. So the scrape worker keeps no copy of the messages it holds in the broker
(no ack emulation, scrapejobs/celery.py: a copy came back only after the visibility timeout, an
hour), and takes a message only when one of its threads is free (scrapejobs/task_end_wake.py,
docs/design/dispatch.md), so it holds none it has not started; any a stopping worker does hold
go back on their queues (apps/scheduling/shutdown_watchdog.py). And a late acknowledgement is
made by the worker's consumer thread, which runs it only when its event loop next wakes (up to a
second later when no broker read is pending, celery#4378), while the message still counts
against the prefetch limit: with 100 threads against a 500 ms target the worker kept on average
about half its threads busy.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from celery import shared_task

from apps.jobs.intake import publisher_nudge
from apps.politeness.limiter import LineShare
from apps.runtime.logs import job_log_context
from apps.scraping.attempt import ClaimUndecided, job_run_attempt
from apps.tracing import TRACEPARENT

logger = logging.getLogger(__name__)

# A job's timeout is at most 300 s (FR-1 to FR-7) and bounds the whole fetch; storing the body
# comes on top. Note: Celery's threads pool does not enforce time limits; the fetch's own
# deadline does. They matter when the task runs in a prefork pool.
SOFT_TIME_LIMIT_S = 300 + 60
HARD_TIME_LIMIT_S = 300 + 120
# A message whose claim could not be decided is sent again after 1, 2, 4, then 8 s, up to 20
# times (about 2.5 minutes of database outage); past that the sweeper's republish takes over.
CLAIM_RETRY_DELAY_S = 1.0
CLAIM_RETRY_MAX = 20


@shared_task(
    bind=True,
    name="apps.scraping.tasks.scrape_job",
    acks_late=False,
    ignore_result=True,
    soft_time_limit=SOFT_TIME_LIMIT_S,
    time_limit=HARD_TIME_LIMIT_S,
    max_retries=None,  # bounded by _redeliver (CLAIM_RETRY_MAX)
)
def scrape_job(
    self: Any, job_id: str, domain: str | None = None, timeout_s: int | None = None, **later: Any
) -> None:
    # ``later``: arguments a publisher of a newer release may add (a rolling upgrade runs both
    # releases side by side); this release does without them rather than fail the message.
    # The lease owner starts with the Celery hostname: a stopping worker gives back exactly the
    # jobs leased under its name (apps.scheduling.shutdown_watchdog).
    host = self.request.hostname or socket.gethostname()
    receipt = None
    try:
        with job_log_context(job_id=job_id, domain=domain):  # every line below names the job
            receipt = job_run_attempt(
                job_id=job_id,
                worker=f"{host}:{os.getpid()}:{threading.get_ident()}",
                domain=domain,
                timeout_s=timeout_s,
                # FR-29: the publish span's traceparent, sent only when tracing is on.
                trace_context=later.get(TRACEPARENT),
                # FR-15: 0 when the job takes no stored result (sent only then).
                max_age_s=later.get("max_age_s"),
                # NFR-9, NFR-10: its place in its domain's line.
                share=LineShare.from_message(later.get("priority"), later.get("tenant"), later.get("weight")),
            )
    except ClaimUndecided as e:
        _redeliver(self, e)
    finally:
        # A slot just freed up: the publisher keeps the broker shallow (SCRAPEJOBS_DISPATCH_DEPTH),
        # so ask it to refill now rather than at its next beat tick (coalesced to one run per
        # SCRAPEJOBS_NUDGE_GAP_S however many scrapes end). An attempt that ran asked already,
        # with its receipt.
        if receipt is None:
            publisher_nudge()


def _redeliver(task: Any, error: ClaimUndecided) -> None:
    """Send this message again, to the back of its queue, after a pause that doubles with each
    redelivery (``CLAIM_RETRY_DELAY_S``, at most 8 times that).

    The pause is slept here, on the monotonic clock, and the new message carries no ETA: a Celery
    countdown becomes an absolute ETA on this worker's wall clock, which the worker that receives
    the message compares with its own, so two skewed clocks would stretch or skip it. Holding the
    thread for a few seconds costs nothing while the database is away, since no claim can succeed
    anyway. After ``CLAIM_RETRY_MAX`` redeliveries the job is left to the sweeper's
    republish (it is still published); ``Task.retry`` raises ``error`` then, and also raises
    (Reject, the message dropped) when the broker cannot take the new message."""
    retries = task.request.retries
    if retries >= CLAIM_RETRY_MAX:
        logger.error("%s; gave up after %d redeliveries, the sweeper republishes it", error, retries)
        raise error
    pause = CLAIM_RETRY_DELAY_S * 2 ** min(retries, 3)
    logger.warning("%s; message sent again in %.1fs (redelivery %d)", error, pause, retries + 1)
    time.sleep(pause)
    raise task.retry(exc=error, countdown=0, max_retries=CLAIM_RETRY_MAX)
