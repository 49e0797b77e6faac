"""The outbox (NFR-1): queued jobs with an empty ``published_at`` are the publisher's to
send. Here are its reads and writes of the ledger: which priorities and tenants have backlog, the
oldest due rows of each (locked), the stamp once their messages are sent, and a job put back into
the outbox with a not-before time (a domain refused it).

The publisher (``apps.publishing.publisher``) chooses in weighted-fair order, holds the dispatcher
lock and sends the messages; it calls these inside its own transaction, which keeps the picked
rows locked from the select to the stamp.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from apps.jobs.models import Job, JobStatus, WaitingFor

# The queries below use the partial index jobs_outbox_fair (render, priority, tenant_id,
# created_at) WHERE status = 'queued' AND published_at IS NULL (apps/publishing/migrations/0001,
# 0003): each is a handful of index probes per priority or tenant, however large the backlog (see
# that migration). Each asks about one ``render`` (FR-30): plain and rendered jobs are dispatched
# apart, to their own queues (NFR-31).

# Which (render, priority) pairs have unpublished rows: one probe each (a LATERAL ... LIMIT 1,
# which the planner keeps as a probe per pair; an EXISTS over two lists became a hash semi-join).
_SELECT_PRIORITIES = """
    SELECT r, p FROM unnest(%s::text[]) AS r CROSS JOIN unnest(%s::text[]) AS p
     CROSS JOIN LATERAL (SELECT 1 FROM jobs_job
                          WHERE status = 'queued' AND published_at IS NULL AND render = r AND priority = p
                          LIMIT 1) AS found
"""

# The next tenants with DUE unpublished rows (``not_before`` passed) in one priority, in tenant id
# order, after a given tenant or from the first, until ``limit`` due ones are found: a loose index
# scan of jobs_outbox_due (priority, tenant_id, not_before NULLS FIRST), one probe per tenant with
# backlog, whose first entry is the tenant's earliest not_before: due when it is empty or passed.
# A tenant whose rows all wait (a domain deferral, a retry) is walked past, never listed
# (listing it cost its priority the round and kept the cursor on it). Due by the database's clock.
_SELECT_TENANTS = """
    WITH RECURSIVE tenants (tenant_id, due, n) AS (
        (SELECT tenant_id, due, due::int FROM (
            SELECT tenant_id, (not_before IS NULL OR not_before <= now()) AS due FROM jobs_job
             WHERE status = 'queued' AND published_at IS NULL AND render = %(render)s
               AND priority = %(priority)s {after}
             ORDER BY tenant_id, not_before NULLS FIRST LIMIT 1) first)
        UNION ALL
        SELECT nxt.tenant_id, nxt.due, t.n + nxt.due::int
          FROM tenants t
         CROSS JOIN LATERAL (
               SELECT tenant_id, (not_before IS NULL OR not_before <= now()) AS due FROM jobs_job
                WHERE status = 'queued' AND published_at IS NULL AND render = %(render)s
                  AND priority = %(priority)s AND tenant_id > t.tenant_id
                ORDER BY tenant_id, not_before NULLS FIRST LIMIT 1) nxt
         WHERE t.n < %(limit)s
    )
    SELECT tenant_id::text FROM tenants WHERE due
"""

# The oldest due rows of each (priority, tenant, how many) asked for, locked. Due by the
# database's clock (now()), which job_claim and the sweeper use too: the publisher's host clock
# never decides.
_SELECT_OLDEST = """
    SELECT w.priority, w.tenant_id::text, j.id::text, j.created_at, j.domain, j.timeout_s,
           j.trace_context, j.max_age_s
      FROM unnest(%s::text[], %s::uuid[], %s::int[]) AS w (priority, tenant_id, n)
     CROSS JOIN LATERAL (
           SELECT id, created_at, domain, timeout_s, trace_context, max_age_s FROM jobs_job
            WHERE status = 'queued' AND published_at IS NULL AND render = %s
              AND priority = w.priority AND tenant_id = w.tenant_id
              AND (not_before IS NULL OR not_before <= now())
              AND NOT (id = ANY(%s::uuid[]))
            ORDER BY created_at
            LIMIT w.n
              FOR UPDATE SKIP LOCKED) j
"""


def outbox_priorities_pending(*, renders: Sequence[str], priorities: Sequence[str]) -> dict[str, set[str]]:
    """Which of ``priorities`` have unpublished rows, for each of ``renders`` that has any; one
    statement for all of them."""
    pending: dict[str, set[str]] = defaultdict(set)
    with connection.cursor() as cur:
        cur.execute(_SELECT_PRIORITIES, [list(renders), list(priorities)])
        for render, priority in cur.fetchall():
            pending[render].add(priority)
    return dict(pending)


def outbox_tenants_due_after(
    *, render: str, priority: str, after: str | None, limit: int, inclusive: bool = False
) -> list[str]:
    """Up to ``limit`` tenants with due unpublished rows of ``render`` in ``priority``, in
    round-robin order: the ones after ``after`` (from ``after`` itself when ``inclusive``) first,
    then from the first tenant again (wrapping)."""
    params: dict[str, Any] = {"render": render, "priority": priority, "limit": limit, "after": after}
    start = ("AND tenant_id >= %(after)s" if inclusive else "AND tenant_id > %(after)s") if after else ""
    with connection.cursor() as cur:
        cur.execute(_SELECT_TENANTS.format(after=start), params)
        tenants = [row[0] for row in cur.fetchall()]
        if after and len(tenants) < limit:
            cur.execute(_SELECT_TENANTS.format(after=""), {**params, "limit": limit - len(tenants)})
            tenants += [t for (t,) in cur.fetchall() if t not in tenants]
    return tenants


def outbox_oldest_lock(
    *, render: str, wanted: Mapping[tuple[str, str], int], skip: Sequence[str]
) -> dict[tuple[str, str], list[tuple[str, str, int, str | None, int]]]:
    """Lock the oldest due rows (``not_before`` passed) of ``render`` each (priority, tenant) of
    ``wanted`` needs, at most its count, leaving out the ids in ``skip``; (id, domain, timeout,
    trace context: FR-29, None when tracing is off; max_age_s) oldest first. Rows locked by someone else are skipped (SKIP LOCKED)."""
    if not wanted:
        return {}
    pairs = list(wanted)
    with connection.cursor() as cur:
        cur.execute(
            _SELECT_OLDEST,
            [
                [p for p, _ in pairs],
                [t for _, t in pairs],
                [wanted[pair] for pair in pairs],
                render,
                list(skip),
            ],
        )
        found: dict[tuple[str, str], list[tuple[datetime, str, str, int, str | None, int]]] = defaultdict(
            list
        )
        for (
            priority,
            tenant,
            job_id,
            created_at,
            domain,
            timeout_s,
            trace_context,
            max_age_s,
        ) in cur.fetchall():
            found[(priority, tenant)].append(
                (created_at, job_id, domain, timeout_s, trace_context, max_age_s)
            )
    return {pair: [row[1:] for row in sorted(rows)] for pair, rows in found.items()}


def outbox_published_stamp(*, job_ids: Sequence[str]) -> None:
    """Mark these jobs as sent to the broker (they leave the outbox). The stamp is the database's
    time: the sweeper measures how long a job has waited untaken against the same clock."""
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE jobs_job SET published_at = now(), version = version + 1"
            " WHERE id = ANY(%s::uuid[]) AND published_at IS NULL",
            [list(job_ids)],
        )


# A domain gate's refusal (apps.politeness DomainDecision.reason) as the job's ``waiting_for``.
_DOMAIN_REFUSALS = {
    "rate": WaitingFor.DOMAIN_RATE,
    "queue": WaitingFor.DOMAIN_TURN,  # others come first in the domain's line
    "concurrency": WaitingFor.DOMAIN_CONCURRENCY,
    "cooldown": WaitingFor.DOMAIN_PAUSED,
    "paused": WaitingFor.DOMAIN_PAUSED,
    "unavailable": WaitingFor.DISPATCH,  # the gate's state (Redis) could not be read
}


def waiting_for_domain_refusal(refusal: str) -> WaitingFor:
    """What a job refused by its domain for ``refusal`` waits for. A refusal this table does not
    know yet is a wait for the domain's pace, the gate's general answer."""
    return _DOMAIN_REFUSALS.get(refusal, WaitingFor.DOMAIN_RATE)


def job_defer_for_domain(*, job_id: uuid.UUID | str, wait_s: float, reason: WaitingFor) -> bool:
    """Put a job refused by its domain back in the outbox, to be published again after
    ``wait_s``; its attempts are unchanged (no attempt was spent). ``reason`` is kept with the
    not-before time for GET /jobs/{id}'s ``waiting_for``. Conditional: only a queued job
    that was published (the message we are handling) is deferred; False means another process
    changed it first (cancelled, claimed by a duplicate message, already deferred)."""
    with transaction.atomic():
        # The row lock closes a race with the publisher: it sends the message before its stamp
        # commits, so the worker can hold the message while the row still reads unpublished. A
        # plain conditional UPDATE would skip that row without waiting (its WHERE fails on the
        # visible version), and the stamp committed after it would leave the job published with
        # no message: stuck until the sweeper's republish. FOR UPDATE waits for the publisher.
        published_at = (
            Job.objects.select_for_update()
            .filter(id=job_id, status=JobStatus.QUEUED)
            .values_list("published_at", flat=True)
            .first()
        )
        if published_at is None:
            return False
        # ``wait_s`` is a duration (the politeness gate measures it on the Redis clock); it is
        # added to the database's clock, which the publisher compares ``not_before`` with, not
        # to this worker's (item 3: a worker 30 s ahead made its deferrals 30 s longer).
        # deferred_until is the same expression in the same statement, hence equal to not_before:
        # the reason holds until something else moves not_before (apps.jobs.selectors).
        until = Now() + timedelta(seconds=wait_s)
        Job.objects.filter(id=job_id).update(
            published_at=None,
            not_before=until,
            defer_reason=reason,
            deferred_until=until,
            updated_at=Now(),
            version=F("version") + 1,
        )
    return True
