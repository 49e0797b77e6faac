"""The weighted-fair order of dispatch (NFR-9, NFR-10): which outbox rows the publisher
(apps/publishing/publisher.py, whose docstring states the rules) sends next. Across priorities by
smooth weighted round-robin on credits kept in Redis; within a priority, weighted round-robin over
the tenants with due backlog from a cursor kept in Redis; each of them per render lane (NFR-31).
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from django.conf import settings

from apps.jobs.outbox import outbox_oldest_lock, outbox_priorities_pending, outbox_tenants_due_after
from apps.redis_clients import state_redis
from apps.tenants.selectors import tenant_weights_get

PRIORITIES = ("high", "normal", "low")
# Per render: hash priority -> smooth weighted round-robin credit; the tenant served last in a
# priority. The plain jobs' keys are the names they had before rendering existed.
_CREDIT_KEYS = {"none": "sj:dispatch:credit", "browser": "sj:dispatch:browser:credit"}
_CURSOR_KEYS = {"none": "sj:dispatch:cursor:{priority}", "browser": "sj:dispatch:browser:cursor:{priority}"}
# A batch whose rows come back short (a tenant had fewer due rows than its slots: retry waits,
# rows locked by an older publisher) offers the remainder again, at most this many times.
_ROUNDS = 3


class Pick(NamedTuple):
    """A row chosen for sending, with what its message carries."""

    job_id: str
    priority: str
    domain: str
    timeout_s: int
    trace_context: str | None = None  # the job's trace (FR-29); None when tracing is off
    max_age_s: int | None = None  # FR-15: 0 lets the worker claim without the single-flight read
    tenant: str = ""  # with weight: the job's share in its domain's line (NFR-10)
    weight: int = 1


class Turn(NamedTuple):
    """Where a priority's tenant round-robin stands: the tenant planned last and how many slots of
    its turn (its weight) it has left. Stored in Redis as ``<tenant>:<left>``."""

    tenant: str | None
    left: int

    @classmethod
    def parse(cls, raw: object) -> Turn:
        if not raw:
            return cls(None, 0)
        tenant, _, left = str(raw).partition(":")
        return cls(tenant, int(left or 0))

    def __str__(self) -> str:
        return f"{self.tenant}:{self.left}"


class TenantPlan(NamedTuple):
    """The tenant of each of a priority's slots, in send order, and the turn it ends on."""

    order: list[str]
    turn: Turn


def dispatch_pick(*, limit: int, render: str = "none", active: set[str] | None = None) -> list[Pick]:
    """Choose and lock up to ``limit`` rows of ``render`` in weighted-fair order; returns them in
    the order to send them. ``active``: its priorities with unpublished rows, when the caller
    asked already. Runs under the dispatcher lock."""
    weights: dict[str, int] = settings.SCRAPEJOBS_PRIORITY_WEIGHTS
    r = state_redis()
    if active is None:
        active = outbox_priorities_pending(renders=[render], priorities=PRIORITIES).get(render, set())
    credit_key, cursor_key = _CREDIT_KEYS[render], _CURSOR_KEYS[render]
    stored = r.hgetall(credit_key)
    credit = {p: int(stored.get(p, 0)) if p in active else 0 for p in PRIORITIES}
    turns = {p: Turn.parse(r.get(cursor_key.format(priority=p))) for p in PRIORITIES}

    picked: list[Pick] = []
    exhausted: set[tuple[str, str]] = set()  # (priority, tenant) with no more due rows this batch
    for _ in range(_ROUNDS):
        want = limit - len(picked)
        if want <= 0 or not active:
            break
        # Only tenants with due rows are planned, and a priority without any drops out before
        # the slots are shared: a tenant whose rows all wait (deferred by its domain, backing off
        # a retry) can no longer be planned, find nothing and cost the others the round.
        due = {
            p: _tenants_due(render=render, priority=p, turn=turns[p], exhausted=exhausted, limit=want)
            for p in active
        }
        active = {p for p in active if due[p]}
        if not active:
            break
        tenant_weights = tenant_weights_get(tenant_ids={t for tenants in due.values() for t in tenants})
        slots = Counter(_weighted_slots(credit=credit, weights=weights, active=active, n=want))
        plans = {
            p: _tenant_plan(tenants=due[p], turn=turns[p], weights=tenant_weights, n=n)
            for p, n in slots.items()
        }
        wanted = Counter((p, tenant) for p, plan in plans.items() for tenant in plan.order)
        rows = outbox_oldest_lock(render=render, wanted=wanted, skip=[pick.job_id for pick in picked])
        for p, plan in plans.items():
            picked += _plan_picks(p, plan, rows, weights=tenant_weights, exhausted=exhausted)
            # The cursor moves to where the plan ended, whether or not that tenant's rows came
            # (locked by someone else, fewer than planned): the next turn is the next tenant's.
            ended = (p, plan.turn.tenant) in exhausted
            turns[p] = Turn(plan.turn.tenant, 0) if ended else plan.turn

    with r.pipeline(transaction=False) as pipe:
        for p in PRIORITIES:
            pipe.hset(credit_key, p, credit[p])
            if turns[p].tenant is not None:
                pipe.set(cursor_key.format(priority=p), str(turns[p]))
        pipe.execute()
    return picked


def _plan_picks(
    priority: str,
    plan: TenantPlan,
    rows: dict[tuple[str, str], list[tuple[str, str, int, str | None, int]]],
    *,
    weights: dict[str, int],
    exhausted: set[tuple[str, str]],
) -> list[Pick]:
    """The oldest locked row of each of the plan's slots, in its order; a tenant whose rows ran
    out is added to ``exhausted``."""
    picks = []
    for tenant in plan.order:
        queue = rows.get((priority, tenant))
        if not queue:
            exhausted.add((priority, tenant))
            continue
        job_id, domain, timeout_s, trace_context, max_age_s = queue.pop(0)
        weight = weights.get(tenant, 1)
        picks.append(
            Pick(job_id, priority, domain, timeout_s, trace_context, max_age_s, tenant=tenant, weight=weight)
        )
    return picks


def _tenants_due(
    *, render: str, priority: str, turn: Turn, exhausted: set[tuple[str, str]], limit: int
) -> list[str]:
    """The tenants with due rows of ``render`` in ``priority``, in round-robin order from
    ``turn``: its tenant first while its turn has slots left, else the ones after it."""
    tenants = outbox_tenants_due_after(
        render=render, priority=priority, after=turn.tenant, limit=limit, inclusive=turn.left > 0
    )
    return [t for t in tenants if (priority, t) not in exhausted]


def _tenant_plan(*, tenants: list[str], turn: Turn, weights: dict[str, int], n: int) -> TenantPlan:
    """Weighted round-robin of ``n`` slots over ``tenants`` (deficit round-robin with a quantum
    of each tenant's weight): a tenant takes its weight in consecutive slots, then the next one
    does. A turn cut short by the end of the batch carries over (``turn.left``), so even one free
    slot per run gives a weight-3 tenant three slots to a weight-1 tenant's one."""
    first = tenants[0]
    left = turn.left if first == turn.tenant and turn.left > 0 else weights.get(first, 1)
    order: list[str] = []
    i = 0
    last = Turn(first, left)
    while len(order) < n:
        tenant = tenants[i % len(tenants)]
        take = min(left, n - len(order))
        order += [tenant] * take
        left -= take
        last = Turn(tenant, left)
        if left == 0:
            i += 1
            left = weights.get(tenants[i % len(tenants)], 1)
    return TenantPlan(order, last)


def _weighted_slots(
    *, credit: dict[str, int], weights: dict[str, int], active: set[str], n: int
) -> list[str]:
    """Smooth weighted round-robin over the active priorities for ``n`` slots (nginx's upstream
    balancing): spreads a priority's share evenly instead of in runs. Updates ``credit``."""
    total = sum(weights[p] for p in active)
    order = [p for p in PRIORITIES if p in active]  # ties go to the higher priority
    slots = []
    for _ in range(n):
        for p in order:
            credit[p] += weights[p]
        best = max(order, key=lambda p: credit[p])
        credit[best] -= total
        slots.append(best)
    return slots
