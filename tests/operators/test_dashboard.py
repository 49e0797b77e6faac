"""The operators' dashboard: staff only, linked from the admin index, one chart
per figure of FR-9, FR-14 over 1 h, 24 h or 7 d, read from the rollups; empty states and
errors in words."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone

from apps.jobs.claims import job_claim
from apps.jobs.models import Attempt, Job
from apps.operators.dashboard import histogram_quantile
from apps.operators.models import AttemptMinute, DomainTotal, GaugeMinute, RollupState
from apps.operators.rollup_runner import _upsert_adding, rollup_run, rollups_prune
from apps.redis_clients import state_redis
from tests.query import helpers

CHART_IDS = [
    "oldest-queued",
    "first-attempt",
    "throughput",
    "failures-by-class",
    "failures-by-domain",
    "queue-depth",
    "past-lease",
    "writer-lag",
    "dead-letters",
    "not-modified-bytes",
]


@pytest.fixture
def staff(db: None) -> Client:
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def charts_of(response) -> dict[str, dict]:
    start = response.content.index(b'id="dashboard-data"')
    payload = response.content[
        response.content.index(b">", start) + 1 : response.content.index(b"</script>", start)
    ]
    return {c["id"]: c for c in json.loads(payload)}


@pytest.mark.django_db
def test_only_staff_see_the_dashboard():
    assert Client().get("/admin/dashboard/").status_code == 302
    member = User.objects.create_user("someone", password="pw")
    client = Client()
    client.force_login(member)
    r = client.get("/admin/dashboard/")
    assert r.status_code == 302 and r["Location"].startswith("/admin/login/")


def test_the_admin_index_links_to_the_dashboard(staff):
    r = staff.get("/admin/")
    assert r.status_code == 200
    assert b'href="/admin/dashboard/"' in r.content


def test_an_unknown_window_is_a_400_naming_the_choices(staff):
    r = staff.get("/admin/dashboard/?window=2w")
    assert r.status_code == 400
    assert b"use one of 1h, 24h, 7d" in r.content


def test_with_nothing_rolled_up_each_chart_says_why_it_is_empty(staff):
    r = staff.get("/admin/dashboard/")
    assert r.status_code == 200
    text = r.content.decode()
    assert "The rollup task has never run" in text
    charts = charts_of(r)
    assert list(charts) == CHART_IDS
    assert all(c["empty"] for c in charts.values())
    assert "<canvas" not in text
    assert "/static/operators/chartjs/chart.umd.min.js" in text


@pytest.mark.parametrize(
    ("window", "points", "step_minutes"), [("1h", 60, 1), ("24h", 96, 15), ("7d", 84, 120)]
)
def test_each_chart_has_points_over_the_chosen_window(staff, make_tenant, window, points, step_minutes):
    tenant, _, _ = make_tenant(name="acme")
    for _ in range(3):
        helpers.succeeded(tenant)
    # One of them answered 304 to a revalidation, keeping a 3 MiB body (FR-35).
    kept = Job.objects.filter(status="succeeded").first()
    Attempt.objects.filter(job_id=kept.id).update(http_status=304)
    Job.objects.filter(id=kept.id).update(result_size=3 * 2**20)
    helpers.failed(tenant)
    stuck = helpers.running(tenant)
    Job.objects.filter(id=stuck.id).update(lease_expires_at=timezone.now() - timedelta(seconds=5))
    helpers.queued(tenant, priority="high")
    helpers.finish(stuck)  # its attempt ends; the job is running no more, but was at the reading below
    rollup_run(settle_s=0)

    r = staff.get(f"/admin/dashboard/?window={window}")

    charts = charts_of(r)
    assert not any(c["empty"] or c["error"] for c in charts.values()), charts
    assert r.content.decode().count("<canvas") == len(CHART_IDS)
    for chart_id in CHART_IDS:
        if chart_id != "failures-by-domain":
            assert len(charts[chart_id]["labels"]) == points
    throughput = charts["throughput"]["datasets"][0]["data"]
    assert sum(v for v in throughput if v) * step_minutes == pytest.approx(4)  # succeeded, per minute
    assert sum(v for v in charts["not-modified-bytes"]["datasets"][0]["data"] if v) == 3  # MiB
    assert charts["failures-by-class"]["datasets"][0]["label"] == "http_404"
    assert charts["failures-by-domain"]["labels"] == ["a.example (1 of 5)"]
    assert charts["queue-depth"]["datasets"][0]["label"] == "acme / high"
    oldest = {d["label"]: d["data"] for d in charts["oldest-queued"]["datasets"]}
    assert any(v is not None for v in oldest["oldest dispatchable (s)"])  # FR-27
    assert "100.0% of 5 jobs started within 60 s in this window: SLO met." in charts["first-attempt"]["note"]


def test_a_missed_slo_is_said_in_words(staff, make_tenant):
    tenant, _, _ = make_tenant()
    for _ in range(2):
        job = helpers.queued(tenant)
        Job.objects.filter(id=job.id).update(created_at=timezone.now() - timedelta(seconds=300))
        assert job_claim(job_id=job.id, worker="w-test") is not None
        helpers.finish(job)
    rollup_run(settle_s=0)
    note = charts_of(staff.get("/admin/dashboard/?window=1h"))["first-attempt"]["note"]
    assert "SLO MISSED" in note


def test_redis_down_is_said_plainly_and_the_charts_still_show(staff, make_tenant):
    tenant, _, _ = make_tenant()
    helpers.succeeded(tenant)
    rollup_run(settle_s=0)
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):  # nothing listens on port 1
        state_redis.cache_clear()
        try:
            r = staff.get("/admin/dashboard/?window=1h")
        finally:
            state_redis.cache_clear()
    assert r.status_code == 200
    assert "The writer&#x27;s state could not be read: Redis did not answer." in r.content.decode()
    assert not charts_of(r)["throughput"]["empty"]


def test_a_stalled_rollup_is_named(staff, make_tenant):
    rollup_run(settle_s=0)
    RollupState.objects.update(updated_at=timezone.now() - timedelta(minutes=10))
    assert "is beat running?" in staff.get("/admin/dashboard/").content.decode()


@pytest.mark.django_db
def test_minute_rows_past_the_retention_are_pruned_and_totals_stay():
    old = timezone.now() - timedelta(days=9)
    AttemptMinute.objects.create(minute=old, outcome="succeeded", attempts=3)
    GaugeMinute.objects.create(minute=old)
    GaugeMinute.objects.create(minute=timezone.now() - timedelta(days=6))
    with override_settings(SCRAPEJOBS_ROLLUP_RETENTION_DAYS=8):
        assert rollups_prune() == 2
    assert GaugeMinute.objects.count() == 1
    later = timezone.now() + timedelta(days=1, hours=12)  # the remaining row is 7.5 days old then
    assert rollups_prune(now=later) == 0
    with override_settings(SCRAPEJOBS_ROLLUP_RETENTION_DAYS=7):
        assert rollups_prune(now=later) == 1


def test_the_quantile_of_a_histogram_is_interpolated_within_its_bucket():
    assert histogram_quantile(0.5, {}) is None
    assert histogram_quantile(0.5, {10: 2}) == pytest.approx(7.5)  # between 5 and 10
    assert histogram_quantile(0.95, {1: 95, 60: 5}) == pytest.approx(1.0)
    assert histogram_quantile(0.99, {1: 1, float("inf"): 99}) == 3600


@pytest.mark.django_db
def test_a_domain_not_seen_within_the_retention_loses_its_total_and_a_named_one_keeps_it():
    """DomainTotal held one row per host ever fetched; now the rows of domains not seen within
    SCRAPEJOBS_ROLLUP_RETENTION_DAYS go, except those /metrics names (their counters stay
    monotonic). The rollup moves last_seen forward, never back."""
    now = timezone.now()
    DomainTotal.objects.create(domain="gone.example", attempts=5, last_seen=now - timedelta(days=9))
    DomainTotal.objects.create(domain="named.example", attempts=7, last_seen=now - timedelta(days=30))
    DomainTotal.objects.create(domain="recent.example", attempts=2, last_seen=now - timedelta(days=2))
    with override_settings(SCRAPEJOBS_ROLLUP_RETENTION_DAYS=8, SCRAPEJOBS_METRICS_DOMAINS=["named.example"]):
        assert rollups_prune() == 1
    assert sorted(DomainTotal.objects.values_list("domain", flat=True)) == ["named.example", "recent.example"]
    hour = (now - timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    _upsert_adding(
        "operators_domaintotal",
        ("domain",),
        ("attempts", "failures"),
        [("recent.example", 3, 1, hour), ("new.example", 1, 0, hour)],
        latest=("last_seen",),
    )
    recent = DomainTotal.objects.get(domain="recent.example")
    assert (recent.attempts, recent.failures, recent.last_seen) == (5, 1, hour)
    older = hour - timedelta(days=3)
    _upsert_adding(
        "operators_domaintotal",
        ("domain",),
        ("attempts", "failures"),
        [("recent.example", 1, 0, older)],
        latest=("last_seen",),
    )
    assert DomainTotal.objects.get(domain="recent.example").last_seen == hour  # not moved back
    assert DomainTotal.objects.get(domain="new.example").last_seen == hour
