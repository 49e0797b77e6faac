"""Reads of the ledger for the operators' rollups, dashboard and ``/metrics``, each
bounded by something other than the ledger's size: a range of attempt ids, the queued jobs, the
running jobs. None of them scans jobs_job or jobs_attempt as a whole.

Finished attempts are read by id, in order, through the primary key: an attempt row is inserted
when its job is claimed (apps/jobs/claims.py) and updated once when it ends, so the rollup keeps a
watermark id and only moves it over attempts that have all ended ("settled"). Each attempt is thus
counted exactly once, at any writer lag, and no index on finished_at is needed (it would make every
receipt's UPDATE of jobs_attempt a non-HOT one).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import date, datetime

from django.db import connection


@dataclass(frozen=True)
class AttemptGroup:
    """Attempts that ended in one minute for one domain, outcome and error class."""

    minute: datetime
    domain: str
    outcome: str
    error_class: str  # "" when the attempt has none
    attempts: int
    dead_letters: int  # of them, attempts that ended their job as failed (a dead letter)
    # Of them, the body bytes the target did not send because it answered 304 (FR-33, FR-35):
    # the size of the body each such attempt's job kept.
    bytes_kept: int = 0


@dataclass(frozen=True)
class FirstAttemptWait:
    """How long one job waited from intake to its first attempt, and the minute that attempt began."""

    minute: datetime
    wait_s: float


@dataclass(frozen=True)
class QueueDepth:
    tenant_id: uuid.UUID
    priority: str
    depth: int
    oldest_age_s: float
    # Of them, the jobs a worker could start now (FR-27): due (no retry backoff or domain deferral
    # still to wait out, ``not_before`` passed) and not parked behind another job's fetch. Their
    # age counts from when they became due (the later of intake and ``not_before``).
    dispatchable: int = 0
    oldest_dispatchable_age_s: float = 0.0
    # Of the dispatchable jobs, those to render in a browser (FR-30): the browser component's own
    # scaling signal; the plain workers' is the rest.
    browser_dispatchable: int = 0
    oldest_browser_dispatchable_age_s: float = 0.0


@dataclass
class QueueSnapshot:
    """The work waiting and running now."""

    depths: list[QueueDepth] = field(default_factory=list)
    running: int = 0
    running_past_lease: int = 0  # their worker is gone; the sweeper will requeue them

    @property
    def queued(self) -> int:
        return sum(d.depth for d in self.depths)

    @property
    def oldest_queued_age_s(self) -> float:
        return max((d.oldest_age_s for d in self.depths), default=0.0)

    @property
    def oldest_dispatchable_age_s(self) -> float:
        """The scaling signal (FR-27, docs/kubernetes.md): only these jobs wait for a worker, so
        only they get older when workers are short."""
        return max((d.oldest_dispatchable_age_s for d in self.depths if d.dispatchable), default=0.0)

    def dispatchable_by_priority(self) -> dict[str, int]:
        by_priority: dict[str, int] = {}
        for d in self.depths:
            by_priority[d.priority] = by_priority.get(d.priority, 0) + d.dispatchable
        return by_priority

    @property
    def browser_dispatchable(self) -> int:
        return sum(d.browser_dispatchable for d in self.depths)

    @property
    def oldest_browser_dispatchable_age_s(self) -> float:
        """The browser component's scaling signal (FR-30, docs/kubernetes.md)."""
        return max(
            (d.oldest_browser_dispatchable_age_s for d in self.depths if d.browser_dispatchable), default=0.0
        )


# The highest attempt id up to which every attempt has ended, at most `limit` ids past the first
# attempt after `after` (so that a gap in the ids - rolled-back claims, pruned rows - of any size
# is crossed in one step). Three bounds: the batch size; the lowest id still running (the current
# attempt of each running job, through the partial index jobs_running_by_lease); and attempts
# started before `settle_s` ago, so that an id handed out to a claim whose transaction has not
# committed yet (ids are not transactional) is never jumped over.
_SETTLED_UPTO_SQL = """
WITH first AS (SELECT COALESCE(min(id) - 1, %(after)s) AS base FROM jobs_attempt WHERE id > %(after)s)
SELECT LEAST(
         first.base + %(limit)s,
         COALESCE((SELECT min(a.id) - 1
                     FROM jobs_job AS j
                     JOIN jobs_attempt AS a ON a.job_id = j.id AND a.number = j.attempts
                    WHERE j.status = 'running' AND a.id > %(after)s),
                  first.base + %(limit)s),
         COALESCE((SELECT max(id)
                     FROM jobs_attempt
                    WHERE id > %(after)s AND id <= first.base + %(limit)s
                      AND started_at < statement_timestamp() - make_interval(secs => %(settle_s)s)),
                  %(after)s))
  FROM first
"""


def attempts_settled_upto(*, after_id: int, limit: int, settle_s: float) -> int:
    """The new watermark: every attempt with an id in (after_id, result] has ended."""
    with connection.cursor() as cur:
        cur.execute(_SETTLED_UPTO_SQL, {"after": after_id, "limit": limit, "settle_s": settle_s})
        (upto,) = cur.fetchone()
    return max(int(upto), after_id)


# Each attempt's job is looked up by primary key (a LATERAL subquery kept apart by OFFSET 0, which
# the planner cannot flatten into a join): a batch costs O(batch) probes. As a plain join, the
# planner hashes the whole of jobs_job as soon as a batch is a few percent of it. A success the
# target answered 304 Not Modified (FR-33, FR-35) is counted under the class ``not_modified``.
_GROUPS_SQL = """
SELECT date_trunc('minute', a.finished_at), j.domain, a.outcome,
       COALESCE(a.error_class, CASE WHEN a.http_status = 304 THEN 'not_modified' ELSE '' END),
       count(*), count(*) FILTER (WHERE j.status = 'failed' AND a.number = j.attempts),
       COALESCE(sum(j.result_size) FILTER (WHERE a.http_status = 304 AND a.outcome = 'succeeded'), 0)
  FROM jobs_attempt AS a
 CROSS JOIN LATERAL (SELECT domain, status, attempts, result_size FROM jobs_job WHERE id = a.job_id OFFSET 0) AS j
 WHERE a.id > %(after)s AND a.id <= %(upto)s AND a.finished_at IS NOT NULL
 GROUP BY 1, 2, 3, 4
"""


def attempt_groups(*, after_id: int, upto_id: int) -> list[AttemptGroup]:
    """The ended attempts with ids in (after_id, upto_id], grouped by minute, domain, outcome
    and error class."""
    with connection.cursor() as cur:
        cur.execute(_GROUPS_SQL, {"after": after_id, "upto": upto_id})
        return [AttemptGroup(*row) for row in cur.fetchall()]


@dataclass(frozen=True)
class TenantUsageGroup:
    """One tenant's attempts of one UTC day and outcome (FR-49, docs/usage.md). ``jobs_submitted``
    counts first attempts under the day their job was submitted; the other figures count attempts
    under the day they ended."""

    day: date
    tenant_id: uuid.UUID
    outcome: str
    jobs_submitted: int
    attempts: int
    bytes_stored: int
    rendered_pages: int


# The same range and per-job probe as _GROUPS_SQL. Each attempt contributes twice (the VALUES
# pair): once as an attempt, under the day it ended, and, when it is its job's first, once as a
# submitted job, under the day the job was created. A body is stored by a success that fetched:
# not one served another job's fetch (single-flight) nor a 304 that kept the previous body.
_TENANT_USAGE_SQL = """
SELECT v.day, j.tenant_id, a.outcome, sum(v.jobs), sum(v.attempts), sum(v.bytes), sum(v.rendered)
  FROM jobs_attempt AS a
 CROSS JOIN LATERAL (SELECT tenant_id, created_at, render, result_size
                       FROM jobs_job WHERE id = a.job_id OFFSET 0) AS j
 CROSS JOIN LATERAL (
       SELECT a.outcome = 'succeeded' AND a.served_from_job IS NULL AND a.revalidated_from IS NULL AS fetched
       ) AS s
 CROSS JOIN LATERAL (VALUES
       ((a.finished_at AT TIME ZONE 'UTC')::date, 0, 1,
        CASE WHEN s.fetched THEN COALESCE(j.result_size, 0) ELSE 0 END,
        CASE WHEN s.fetched AND j.render = 'browser' THEN 1 ELSE 0 END),
       ((j.created_at AT TIME ZONE 'UTC')::date, 1, 0, 0, 0)
       ) AS v(day, jobs, attempts, bytes, rendered)
 WHERE a.id > %(after)s AND a.id <= %(upto)s AND a.finished_at IS NOT NULL
   AND (v.jobs = 0 OR a.number = 1)
 GROUP BY 1, 2, 3
"""


def tenant_usage_groups(*, after_id: int, upto_id: int) -> list[TenantUsageGroup]:
    """The ended attempts with ids in (after_id, upto_id], grouped by UTC day, tenant and outcome."""
    with connection.cursor() as cur:
        cur.execute(_TENANT_USAGE_SQL, {"after": after_id, "upto": upto_id})
        return [
            TenantUsageGroup(day, tenant, outcome, int(jobs), int(attempts), int(size), int(rendered))
            for day, tenant, outcome, jobs, attempts, size, rendered in cur.fetchall()
        ]


_FIRST_WAITS_SQL = """
SELECT date_trunc('minute', a.started_at), GREATEST(EXTRACT(EPOCH FROM a.started_at - j.created_at), 0)
  FROM jobs_attempt AS a
 CROSS JOIN LATERAL (SELECT created_at FROM jobs_job WHERE id = a.job_id OFFSET 0) AS j
 WHERE a.id > %(after)s AND a.id <= %(upto)s AND a.number = 1
"""


def first_attempt_waits(*, after_id: int, upto_id: int) -> list[FirstAttemptWait]:
    """Time to first attempt (the SLO's figure) of each first attempt with an id in the range."""
    with connection.cursor() as cur:
        cur.execute(_FIRST_WAITS_SQL, {"after": after_id, "upto": upto_id})
        return [FirstAttemptWait(minute, float(wait)) for minute, wait in cur.fetchall()]


# Both read only queued or running rows, through partial indexes: jobs_queued_backlog
# (index-only: it carries tenant, priority, not_before and fetch_parked_at, so the dispatchable
# figures come from the same pass) and jobs_running_by_lease. Due by the database's clock, as the
# publisher and job_claim judge it (apps/jobs/outbox.py, apps/jobs/claims.py).
_QUEUED_SQL = """
SELECT tenant_id, priority, count(*), EXTRACT(EPOCH FROM statement_timestamp() - min(created_at)),
       count(*) FILTER (WHERE {dispatchable}),
       COALESCE(EXTRACT(EPOCH FROM statement_timestamp()
                        - min(GREATEST(created_at, not_before)) FILTER (WHERE {dispatchable})), 0),
       count(*) FILTER (WHERE {dispatchable} AND render = 'browser'),
       COALESCE(EXTRACT(EPOCH FROM statement_timestamp()
                        - min(GREATEST(created_at, not_before))
                          FILTER (WHERE {dispatchable} AND render = 'browser')), 0)
  FROM jobs_job
 WHERE status = 'queued'
 GROUP BY 1, 2
 ORDER BY 1, 2
""".format(
    dispatchable="fetch_parked_at IS NULL AND (not_before IS NULL OR not_before <= statement_timestamp())"
)
_RUNNING_SQL = """
SELECT count(*), count(*) FILTER (WHERE lease_expires_at < statement_timestamp())
  FROM jobs_job
 WHERE status = 'running'
"""


def queue_snapshot() -> QueueSnapshot:
    """Queue depth per tenant and priority (and of it, the dispatchable jobs), the oldest queued
    and oldest dispatchable job's age, running jobs and those past their lease. Costs O(queued + running jobs), whatever the ledger's size."""
    snapshot = QueueSnapshot()
    with connection.cursor() as cur:
        cur.execute(_QUEUED_SQL)
        snapshot.depths = [
            QueueDepth(
                tenant_id=t,
                priority=p,
                depth=n,
                oldest_age_s=max(float(age), 0.0),
                dispatchable=due,
                oldest_dispatchable_age_s=max(float(due_age), 0.0),
                browser_dispatchable=browser,
                oldest_browser_dispatchable_age_s=max(float(browser_age), 0.0),
            )
            for t, p, n, age, due, due_age, browser, browser_age in cur.fetchall()
        ]
        cur.execute(_RUNNING_SQL)
        snapshot.running, snapshot.running_past_lease = cur.fetchone()
    return snapshot
