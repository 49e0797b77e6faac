"""The scrape task: one message per job, on the queue of its priority (``jobs.<priority>``).

Thin: the message carries the job id, and the job's domain and timeout for the politeness gate
(facts that never change after intake); ``job_run_attempt`` re-reads the job through its claim
and does nothing for a duplicate.

Acknowledged when it starts (``acks_late=False``), unlike the control tasks. Nothing rests on the
message once the task runs: a job whose worker dies before its claim stays published and untaken,
and the sweeper publishes it again after ``SCRAPEJOBS_REPUBLISH_AFTER_S`` (5 minutes); after its
claim the lease brings it back. Redelivering an unacknowledged message would only come after the
broker's visibility timeout (an hour). And a late acknowledgement is made by the worker's consumer
thread, which runs it only when its event loop next wakes (up to a second later when no broker
read is pending, celery#4378), while the message still counts against the prefetch limit: with 100
threads against a 500 ms target the worker kept on average about half its threads busy (issue 7).
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from celery import shared_task

from apps.jobs.intake import publisher_nudge
from apps.scraping.services import job_run_attempt

# A job's timeout is at most 300 s (contract 2) and bounds the whole fetch; storing the body
# comes on top. Note: Celery's threads pool does not enforce time limits; the fetch's own
# deadline does. They matter when the task runs in a prefork pool.
SOFT_TIME_LIMIT_S = 300 + 60
HARD_TIME_LIMIT_S = 300 + 120


@shared_task(
    bind=True,
    name="apps.scraping.tasks.scrape_job",
    acks_late=False,
    ignore_result=True,
    soft_time_limit=SOFT_TIME_LIMIT_S,
    time_limit=HARD_TIME_LIMIT_S,
)
def scrape_job(self: Any, job_id: str, domain: str | None = None, timeout_s: int | None = None) -> None:
    # The lease owner starts with the Celery hostname: a stopping worker gives back exactly the
    # jobs leased under its name (apps.scheduling.shutdown).
    host = self.request.hostname or socket.gethostname()
    receipt = None
    try:
        receipt = job_run_attempt(
            job_id=job_id,
            worker=f"{host}:{os.getpid()}:{threading.get_ident()}",
            domain=domain,
            timeout_s=timeout_s,
        )
    finally:
        # A slot just freed up: the publisher keeps the broker shallow (SCRAPEJOBS_DISPATCH_DEPTH),
        # so ask it to refill now rather than at its next beat tick (coalesced to one run per
        # 50 ms however many scrapes end). An attempt that ran asked already, with its receipt.
        if receipt is None:
            publisher_nudge()
