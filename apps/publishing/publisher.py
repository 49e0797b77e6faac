"""The outbox publisher, which is also the dispatcher (NFR-1, NFR-5; NFR-9, NFR-10).

Queued rows with an empty ``published_at`` become broker messages, one per job, on the queue of the
job's priority. The broker is kept shallow (at most ``SCRAPEJOBS_DISPATCH_DEPTH`` messages waiting)
so that the order in which work starts is the order chosen here, not the broker's: workers read
the three queues round-robin, which under saturation would give 1:1:1 and first-come-first-served
per queue (one tenant's burst of 10,000 jobs ahead of everybody). Each batch fills the free room
in weighted-fair order:

- across priorities by smooth weighted round-robin (weights ``SCRAPEJOBS_PRIORITY_WEIGHTS``, 6:3:1):
  each slot adds every priority's weight to its credit and goes to the priority with the most
  credit, which pays the sum of the weights. The credits live in Redis across batches, so even
  one free slot per run converges to 6:3:1 and ``low`` gets a slot in every ten; a priority
  without backlog drops out (its share goes to the others) and its credit is reset to zero, so
  it cannot come back with a burst it saved up while idle;
- within a priority, round-robin over the tenants with due backlog (a tenant whose rows all wait
  for their ``not_before`` is not planned), starting after the tenant planned last (a cursor in
  Redis that always moves on), oldest job of each tenant first: shares in proportion to the
  tenants' weights (``Tenant.weight``, 1 by default: equal shares) whatever the backlog.

Delivery is at-least-once. A transaction-scoped advisory lock lets one dispatcher (beat's tick, the
intake and scrape nudges) run at a time (the others return at once), so the free room is measured once per batch and the credits
and cursors are read-modified-written by one at a time; the rows are also locked (``FOR UPDATE
SKIP LOCKED``) from the select to the stamp. The broker send happens inside that short transaction
on purpose: it is the one piece of network I/O that must be covered by the row lock. A crash
between the send and the commit leaves the rows unstamped and they are sent again next round; the
duplicate message is harmless because ``job_claim`` is a conditional update.

Rendered jobs (``render = "browser"``, FR-30) are dispatched apart (NFR-31): to one queue of their
own, ``jobs.browser``, served by the ``browser`` component, with their own free room
(``SCRAPEJOBS_BROWSER_DISPATCH_DEPTH`` messages), priority credits and tenant cursors, and the
same 6:3:1 weights inside it. A plain backlog never waits behind rendered jobs nor the reverse,
and with no rendered job in the outbox a batch costs what it did before (the one existence
statement answers for both).

This module sends what apps/publishing/fair_order.py chooses; its reads and writes of the ledger
(which priorities and tenants have backlog, the oldest due rows, the stamp) are
``apps.jobs.outbox``'s.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import connection, transaction

from apps import tracing
from apps.jobs.outbox import outbox_priorities_pending, outbox_published_stamp
from apps.publishing.fair_order import PRIORITIES, Pick, dispatch_pick
from apps.tracing import TRACEPARENT, traceparent_current, tracing_on

SCRAPE_TASK = "apps.scraping.tasks.scrape_job"
# Job.render values (apps.jobs.models.Render), in the order their batches are sent.
RENDERS = ("none", "browser")
BROWSER_QUEUE = "jobs.browser"

# pg_advisory_xact_lock key of the dispatcher (any constant unique within this database).
_DISPATCH_LOCK_ID = 0x5C4A_D15B


def scrape_queue(priority: str, render: str = "none") -> str:
    return BROWSER_QUEUE if render == "browser" else f"jobs.{priority}"


def broker_depths(channel: Any, renders: Sequence[str] = RENDERS) -> dict[str, int]:
    """Scrape messages waiting in the broker for each of ``renders``, in one round trip. kombu's
    Redis transport keeps one list per queue and priority step, named ``<queue>`` for priority 0
    (ours) and ``<queue><sep><step>`` otherwise; messages already reserved by a worker are no
    longer in them."""
    keys = [
        (render, channel._q_for_pri(queue, step))
        for render in renders
        for queue in sorted({scrape_queue(p, render) for p in PRIORITIES})
        for step in channel.priority_steps
    ]
    with channel.client.pipeline(transaction=False) as pipe:
        for _, key in keys:
            pipe.llen(key)
        lengths = pipe.execute()
    depths = dict.fromkeys(renders, 0)
    for (render, _), length in zip(keys, lengths, strict=True):
        depths[render] += length
    return depths


def outbox_publish_batch(*, limit: int, depth: int | None = None, browser_depth: int | None = None) -> int:
    """Send up to ``limit`` unpublished jobs of each render whose retry time (``not_before``)
    has come, in weighted-fair order, over one producer connection; stamp them. With ``depth``,
    send no more plain jobs than keeps at most ``depth`` scrape messages waiting in the broker;
    rendered jobs likewise within ``browser_depth`` (default: the setting) on their own queue.
    Returns how many were sent."""
    if browser_depth is None:
        browser_depth = settings.SCRAPEJOBS_BROWSER_DISPATCH_DEPTH
    # The process's Celery app (scrapejobs/celery.py makes it current at start-up); apps import
    # nothing of the project package, so it is looked up, not imported.
    app = current_app._get_current_object()  # type: ignore[attr-defined]  # a Proxy, typed as the app

    with transaction.atomic(), connection.cursor() as cur:
        # One dispatcher at a time (released at commit): the free room below stays true while we
        # fill it, and the credits and cursors are not updated by two at once. Try, never wait:
        # the one running fills the room, and a run blocked behind a broker send that is retrying
        # (Redis down) must not pile up and hold every thread of the control queue.
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [_DISPATCH_LOCK_ID])
        if not cur.fetchone()[0]:
            return 0
        with app.producer_or_acquire() as producer:
            rooms, pending = _rooms_and_pending(
                producer.channel, limit=limit, depth=depth, browser_depth=browser_depth
            )
            open_renders = [render for render in RENDERS if rooms[render] > 0]
            if not open_renders:
                return 0
            picked: list[Pick] = []
            started_ns = time.time_ns()
            # Every message of the batch in one pipelined round trip (kombu's publish batch), sent
            # when the block ends, before the stamp: a failed send raises here, the transaction
            # rolls back and the rows go again next round, as when one send of many failed.
            declared: set[str] = set()
            with producer.batch():
                for render in open_renders:
                    if render not in pending:
                        continue
                    lane = dispatch_pick(limit=rooms[render], render=render, active=pending[render])
                    for pick in lane:
                        _scrape_message_send(app, producer, pick=pick, render=render, declared=declared)
                    picked += lane
            if not picked:
                return 0
            # FR-29: the batch is one span of its own (from its first send), linked to every
            # job it sent, whose publish span is in that job's trace. An empty batch (most
            # ticks) makes none, nor does anything when tracing is off.
            if tracing_on():
                with tracing.span(
                    "outbox.publish_batch",
                    root=True,
                    start_ns=started_ns,
                    links=[pick.trace_context for pick in picked],
                    attributes={"scrapejobs.jobs": len(picked)},
                ):
                    pass
        outbox_published_stamp(job_ids=[pick.job_id for pick in picked])
    return len(picked)


def _rooms_and_pending(
    channel: Any, *, limit: int, depth: int | None, browser_depth: int | None
) -> tuple[dict[str, int], dict[str, set[str]]]:
    """The broker room of each render and which priorities of the renders with room have
    backlog. A plain job's publish costs what it cost before rendering existed (NFR-15): the
    plain queues' depths in one round trip, then one statement for the backlog of both renders;
    the browser queue's depth is read only when rendered jobs are waiting to be sent (a second
    round trip then), or when the plain queues are full and only rendered jobs could go."""
    bounds = {"none": depth, "browser": browser_depth}
    rooms = dict.fromkeys(RENDERS, limit)

    def measure(renders: Sequence[str]) -> None:
        measured = [render for render in renders if bounds[render] is not None]
        if measured:
            waiting = broker_depths(channel, measured)
            for render in measured:
                rooms[render] = min(limit, int(bounds[render] or 0) - waiting[render])

    measure(["none"])
    if rooms["none"] > 0:
        pending = outbox_priorities_pending(renders=RENDERS, priorities=PRIORITIES)
        if "browser" in pending:
            measure(["browser"])
        return rooms, pending
    measure(["browser"])
    if rooms["browser"] <= 0:
        return rooms, {}
    return rooms, outbox_priorities_pending(renders=["browser"], priorities=PRIORITIES)


def _scrape_message_send(
    app: Any, producer: Any, *, pick: Pick, render: str, declared: set[str] | None = None
) -> None:
    """One scrape message. The domain and timeout ride along: the worker's politeness gate needs
    them before the claim, and would otherwise read the row for them. With tracing on (FR-29)
    and a job that has a trace, the send is that trace's ``job.publish`` span, whose
    ``traceparent`` the message carries to the attempt (an extra keyword an older worker takes
    into ``**later``); without one the message is what it always was.

    ``declared``: the queues this batch already sent to. Celery declares a message's queue with
    every send (kombu remembers it after the first, but asks through its retrying wrapper every
    time, about a third of a send); once per queue and batch keeps what the declare is for (a
    broker that lost the queue's binding gets it back before the batch's messages) at a
    fraction of the cost (NFR-11)."""
    kwargs: dict[str, Any] = {"domain": pick.domain, "timeout_s": pick.timeout_s}
    # Its place in its domain's line (NFR-9, NFR-10 at the gate, apps.politeness.limiter): the
    # priority and the tenant with its weight, as this dispatch shared the pool by them. An older
    # worker takes them into ``**later`` and stands every job as normal.
    kwargs.update(priority=pick.priority, tenant=pick.tenant, weight=pick.weight)
    if pick.max_age_s == 0:
        # A job that takes no stored result has nothing for the single-flight decision to read:
        # the worker claims it at once (apps.scraping.attempt). An older worker takes the
        # keyword into ``**later`` and reads as before. max_age_s never changes after intake.
        kwargs["max_age_s"] = 0
    with (
        tracing.span("job.publish", parent=pick.trace_context, attributes={"scrapejobs.job_id": pick.job_id})
        if pick.trace_context is not None
        else nullcontext()
    ):
        traceparent = traceparent_current() if pick.trace_context is not None else None
        if traceparent is not None:
            kwargs[TRACEPARENT] = traceparent
        args = [pick.job_id]
        queue = scrape_queue(pick.priority, render)
        once: dict[str, Any] = {}
        if declared is not None:
            if queue in declared:
                once["declare"] = []
            declared.add(queue)
        app.send_task(
            SCRAPE_TASK,
            args=args,
            kwargs=kwargs,
            queue=queue,
            producer=producer,
            **once,
            # What the message shows of its arguments (Flower, the worker's log): plain repr, as
            # Celery's own saferepr would give for these few short strings and numbers, at a
            # fraction of its cost per message (NFR-11).
            argsrepr=repr(args),
            kwargsrepr=repr(kwargs),
        )


def outbox_publish(
    *, batch_size: int, budget_s: float, depth: int | None = None, browser_depth: int | None = None
) -> int:
    """Publish batch after batch while full batches keep coming (and, with ``depth``, while the
    broker has room), for at most about ``budget_s`` (then the next beat tick or nudge carries
    on). Returns how many jobs were sent."""
    deadline = time.monotonic() + budget_s
    total = 0
    while True:
        sent = outbox_publish_batch(limit=batch_size, depth=depth, browser_depth=browser_depth)
        total += sent
        if sent < batch_size or time.monotonic() >= deadline:
            return total
