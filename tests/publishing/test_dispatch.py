"""Fair dispatch (NFR-5): NFR-9 (priorities) and NFR-10 (tenant fairness).

The publisher keeps the broker shallow and fills the free room in weighted-fair order. These tests
run it against the real database and the real Redis broker; "the broker drained" is simulated by
deleting the scrape queues' lists between runs, after reading what was sent.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from datetime import timedelta

import environ
import pytest
import redis
from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.jobs.intake import job_create
from apps.jobs.models import Job
from apps.jobs.outbox import _SELECT_OLDEST, _SELECT_PRIORITIES, _SELECT_TENANTS
from apps.publishing.publisher import (
    outbox_publish,
    outbox_publish_batch,
)
from apps.tenants.models import Tenant
from settings.base import _priority_weights

QUEUES = ("jobs.high", "jobs.normal", "jobs.low")


def _broker() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


def _drain() -> list[str]:
    """Job ids in the scrape queues, in the order a worker would take them from each queue (kombu
    pushes on the left and pops on the right), then empty the queues."""
    ids: list[str] = []
    for queue in QUEUES:
        for raw in reversed(_broker().lrange(queue, 0, -1)):
            args, _kwargs, _embed = json.loads(base64.b64decode(json.loads(raw)["body"]))
            ids.append(args[0])
        _broker().delete(queue)
    return ids


def _backlog(tenant, priority: str, n: int) -> None:
    """``n`` queued, unpublished jobs of ``tenant`` in ``priority``, oldest first: one through
    job_create, the rest copied from it in one statement (a large backlog in milliseconds)."""
    job, _ = job_create(
        tenant_id=tenant.id, url="http://example.test/", domain="example.test", priority=priority
    )
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO jobs_job (id, method, url, headers, body, domain, priority, callback_url,
                   timeout_s, max_age_s, max_attempts, attempt_budget, status, attempts, created_at,
                   updated_at, tenant_id)
            SELECT gen_random_uuid(), method, url || g, headers, body, domain, priority, callback_url,
                   timeout_s, max_age_s, max_attempts, attempt_budget, status, attempts,
                   created_at + g * interval '1 microsecond', updated_at, tenant_id
              FROM jobs_job, generate_series(1, %s) g
             WHERE id = %s
            """,
            [n - 1, job.id],
        )


def _runs(*, runs: int, capacity: int) -> list[list[Job]]:
    """Publish ``runs`` times with room for ``capacity`` messages, the broker drained in between;
    the jobs each run sent, in the order a worker takes them."""
    sent = []
    for _ in range(runs):
        outbox_publish_batch(limit=1000, depth=capacity)
        ids = _drain()
        jobs = {str(j.id): j for j in Job.objects.filter(id__in=ids)}
        sent.append([jobs[i] for i in ids])
    return sent


def _per_priority(run: list[Job]) -> Counter:
    return Counter(j.priority for j in run)


@pytest.mark.django_db
def test_with_backlog_in_all_three_priorities_work_is_published_six_three_one(make_tenant):
    """NFR-9 (priorities)."""
    tenant, _, _ = make_tenant()
    for priority, n in (("high", 200), ("normal", 100), ("low", 40)):
        _backlog(tenant, priority, n)
    runs = _runs(runs=30, capacity=10)
    for run in runs:
        counts = _per_priority(run)
        assert len(run) == 10
        assert abs(counts["high"] - 6) <= 1 and abs(counts["normal"] - 3) <= 1 and abs(counts["low"] - 1) <= 1
    total = _per_priority([j for run in runs for j in run])
    assert total == {"high": 180, "normal": 90, "low": 30}


@pytest.mark.django_db
def test_one_free_slot_per_run_still_converges_to_six_three_one(make_tenant):
    """NFR-9 (priorities): the credits carry over between runs (Redis), so a dispatcher that only
    ever has room for one message does not send high every time."""
    tenant, _, _ = make_tenant()
    for priority in ("high", "normal", "low"):
        _backlog(tenant, priority, 30)
    runs = _runs(runs=20, capacity=1)
    assert _per_priority([j for run in runs for j in run]) == {"high": 12, "normal": 6, "low": 2}


@pytest.mark.django_db
def test_an_empty_priority_gives_its_share_to_the_others(make_tenant):
    """NFR-9 (priorities): with high empty, normal and low share 3:1."""
    tenant, _, _ = make_tenant()
    _backlog(tenant, "normal", 120)
    _backlog(tenant, "low", 60)
    runs = _runs(runs=10, capacity=10)
    assert all(len(run) == 10 for run in runs)
    total = _per_priority([j for run in runs for j in run])
    assert abs(total["normal"] - 75) <= 1 and abs(total["low"] - 25) <= 1


@pytest.mark.django_db
def test_low_gets_a_slot_in_every_ten_under_a_flood_of_high(make_tenant):
    """NFR-9 (priorities): low never starves."""
    tenant, _, _ = make_tenant()
    _backlog(tenant, "high", 2000)
    _backlog(tenant, "low", 30)
    for run in _runs(runs=10, capacity=10):
        assert _per_priority(run)["low"] >= 1


@pytest.mark.django_db
def test_the_weights_are_a_setting(make_tenant, settings):
    """NFR-9 (priorities): SCRAPEJOBS_PRIORITY_WEIGHTS."""
    settings.SCRAPEJOBS_PRIORITY_WEIGHTS = {"high": 1, "normal": 1, "low": 2}
    tenant, _, _ = make_tenant()
    for priority in ("high", "normal", "low"):
        _backlog(tenant, priority, 20)
    assert _per_priority([j for run in _runs(runs=5, capacity=4) for j in run]) == {
        "high": 5,
        "normal": 5,
        "low": 10,
    }


@pytest.mark.parametrize("raw", ["6,0,1", "6,3", "a,b,c", "6,3,1,1"])
def test_weights_that_would_starve_a_priority_or_do_not_parse_fail_at_start_up(monkeypatch, raw):
    monkeypatch.setenv("SJ_TEST_WEIGHTS", raw)
    with pytest.raises(environ.ImproperlyConfigured):
        _priority_weights("SJ_TEST_WEIGHTS", "6,3,1")
    monkeypatch.setenv("SJ_TEST_WEIGHTS", "10,5,2")
    assert _priority_weights("SJ_TEST_WEIGHTS", "6,3,1") == {"high": 10, "normal": 5, "low": 2}


@pytest.mark.parametrize("capacity", [10, 3])
@pytest.mark.django_db
def test_two_tenants_in_a_priority_take_turns_whatever_the_size_of_their_backlog(make_tenant, capacity):
    """NFR-10 (tenant fairness): a burst of 500 does not delay a tenant with 20."""
    crawler, _, _ = make_tenant()
    shop, _, _ = make_tenant()
    _backlog(crawler, "normal", 500)  # older: first come, first served would send all of these first
    _backlog(shop, "normal", 20)
    sent = [j for run in _runs(runs=-(-40 // capacity), capacity=capacity) for j in run][:40]
    owners = [j.tenant_id for j in sent]
    assert Counter(owners) == {crawler.id: 20, shop.id: 20}
    assert all(a != b for a, b in zip(owners, owners[1:], strict=False)), owners
    # Each tenant's own jobs still go oldest first.
    for tenant in (crawler, shop):
        mine = [j.created_at for j in sent if j.tenant_id == tenant.id]
        assert mine == sorted(mine)


@pytest.mark.django_db
def test_a_tenant_with_fewer_jobs_than_its_share_leaves_the_rest_to_the_others(make_tenant):
    """NFR-10 (tenant fairness): shares are equal among tenants with backlog, and no slot is wasted."""
    big, _, _ = make_tenant()
    small, _, _ = make_tenant()
    _backlog(big, "normal", 50)
    _backlog(small, "normal", 2)
    (run,) = _runs(runs=1, capacity=10)
    assert Counter(j.tenant_id for j in run) == {big.id: 8, small.id: 2}


@pytest.mark.django_db
def test_the_broker_never_holds_more_than_the_dispatch_depth(make_tenant):
    tenant, _, _ = make_tenant()
    _backlog(tenant, "normal", 20)
    assert outbox_publish(batch_size=100, budget_s=5, depth=5) == 5
    assert outbox_publish(batch_size=100, budget_s=5, depth=5) == 0  # nothing was taken
    _broker().rpop("jobs.normal", 2)  # a worker takes two
    assert outbox_publish(batch_size=100, budget_s=5, depth=5) == 2
    assert _broker().llen("jobs.normal") == 5
    assert Job.objects.filter(published_at__isnull=True).count() == 13


@pytest.mark.django_db
def test_the_dispatch_queries_are_index_probes_even_with_a_large_backlog(make_tenant):
    tenants = [make_tenant()[0] for _ in range(4)]
    for tenant in tenants:
        for priority in ("high", "normal", "low"):
            _backlog(tenant, priority, 2000)
    with connection.cursor() as cur:
        # Four in five are history, as in any jobs table that has run for a while: 4,800 rows
        # left in the outbox among 24,000.
        cur.execute(
            "UPDATE jobs_job SET status = 'succeeded', published_at = now()"
            " WHERE substr(url, length(url)) IN ('1', '2', '3', '4', '5', '6', '7', '8')"
        )
        cur.execute("ANALYZE jobs_job")
        plans = {}
        for name, sql, params in (
            ("priorities", _SELECT_PRIORITIES, [["none", "browser"], ["high", "normal", "low"]]),
            (
                "tenants",
                _SELECT_TENANTS.format(after=""),
                {"render": "none", "priority": "normal", "limit": 10},
            ),
            (
                "oldest",
                _SELECT_OLDEST,
                [["normal", "low"], [str(tenants[0].id), str(tenants[1].id)], [6, 3], "none", []],
            ),
        ):
            cur.execute("EXPLAIN " + sql, params)
            plans[name] = "\n".join(row[0] for row in cur.fetchall())
    # The tenant walk reads jobs_outbox_due (a tenant's earliest not_before first); the others
    # jobs_outbox_fair (either serves the priorities' existence probe).
    indexes = {"priorities": ("jobs_outbox_fair", "jobs_outbox_due"), "tenants": ("jobs_outbox_due",)}
    for name, plan in plans.items():
        assert any(index in plan for index in indexes.get(name, ("jobs_outbox_fair",))), (name, plan)
        # No scan or sort of the whole backlog: every read is a bounded walk of the index.
        assert "Seq Scan on jobs_job" not in plan and "Bitmap" not in plan, (name, plan)
        assert "Sort" not in plan and "Aggregate" not in plan, (name, plan)


def _defer_all(tenant, *, seconds: int = 3600) -> None:
    """Every outbox row of ``tenant`` waits (``not_before`` in the future), as a domain deferral
    or a retry leaves it."""
    Job.objects.filter(tenant_id=tenant.id, published_at__isnull=True).update(
        not_before=timezone.now() + timedelta(seconds=seconds)
    )


@pytest.mark.parametrize("capacity", [1, 2])
@pytest.mark.django_db
def test_a_tenant_whose_jobs_all_wait_does_not_stall_the_others_in_its_priority(make_tenant, capacity):
    """NFR-10: a tenant with backlog that is all deferred used to be planned,
    have nothing due, and cost its priority the round, the cursor never moving past it."""
    tenants = sorted((make_tenant()[0] for _ in range(3)), key=lambda t: str(t.id))
    waiting, *others = tenants  # first in round-robin order: planned first every round
    _backlog(waiting, "normal", 500)
    _defer_all(waiting)
    for tenant in others:
        _backlog(tenant, "normal", 20)
    sent = [j for run in _runs(runs=10, capacity=capacity) for j in run]
    assert len(sent) == 10 * capacity
    assert Counter(j.tenant_id for j in sent) == {t.id: 5 * capacity for t in others}


@pytest.mark.parametrize("capacity", [1, 4, 10])
@pytest.mark.django_db
def test_a_tenant_of_weight_three_gets_three_times_the_share_of_a_weight_one_tenant(make_tenant, capacity):
    """Tenant.weight scales the share within a priority; a turn cut by a small
    free room carries over to the next run."""
    heavy, _, _ = make_tenant()
    light, _, _ = make_tenant()
    Tenant.objects.filter(id=heavy.id).update(weight=3)
    _backlog(heavy, "normal", 300)
    _backlog(light, "normal", 300)
    sent = [j for run in _runs(runs=-(-40 // capacity), capacity=capacity) for j in run][:40]
    assert Counter(j.tenant_id for j in sent) == {heavy.id: 30, light.id: 10}
    # Every window of four starts is three of the heavy tenant's and one of the light one's.
    for start in range(0, 40, 4):
        window = Counter(j.tenant_id for j in sent[start : start + 4])
        assert window == {heavy.id: 3, light.id: 1}, (start, window)
