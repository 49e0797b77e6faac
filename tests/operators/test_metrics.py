"""/metrics: prometheus_client's text format, the queue read live through
partial indexes, attempt counters and the time-to-first-attempt histogram from the rollups,
request metrics from every web process, and a guard for production."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
import requests
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from apps.jobs.claims import job_claim
from apps.jobs.intake import job_create
from apps.jobs.models import Attempt, Job, WaitingFor
from apps.jobs.outbox import job_defer_for_domain, outbox_published_stamp
from apps.jobs.singleflight import job_fetch_decide
from apps.operators.models import GaugeMinute
from apps.operators.rollup_runner import BATCH_ATTEMPTS, rollup_run
from scrapejobs.celery import _beat_schedule
from tests.query import helpers
from tests.support.net import free_port
from tests.support.procs import wait_for


def scrape(client: Client | None = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics, parsed by prometheus_client's own parser: {(sample name, labels): value}."""
    r = (client or Client()).get("/metrics")
    assert r.status_code == 200, r.content
    assert r["Content-Type"].startswith("text/plain; version=")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.content.decode())
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def on_domain(tenant, domain: str, **kw) -> Job:
    job, _ = job_create(tenant_id=tenant.id, url=f"http://{domain}/", domain=domain, **kw)
    return job


@pytest.mark.django_db
def test_it_reports_the_queue_now_per_tenant_and_priority_with_the_oldest_age_and_expired_leases(make_tenant):
    tenant, _, _ = make_tenant(name="acme")
    old = helpers.queued(tenant, priority="high")
    Job.objects.filter(id=old.id).update(created_at=timezone.now() - timedelta(seconds=120))
    helpers.queued(tenant)
    stuck = helpers.running(tenant)
    Job.objects.filter(id=stuck.id).update(lease_expires_at=timezone.now() - timedelta(seconds=5))
    helpers.running(tenant)
    helpers.succeeded(tenant)

    samples = scrape()

    assert value(samples, "scrapejobs_jobs", status="queued") == 2
    assert value(samples, "scrapejobs_jobs", status="running") == 2
    # time is the subject: an age gauge, read against a job backdated
    # 120 s; the margin covers the test's own run
    assert 119 < value(samples, "scrapejobs_oldest_queued_job_age_seconds") < 180
    assert value(samples, "scrapejobs_jobs_running_past_lease") == 1
    assert value(samples, "scrapejobs_queue_depth", tenant="acme", priority="high") == 1
    assert value(samples, "scrapejobs_queue_depth", tenant="acme", priority="normal") == 1
    assert value(samples, "scrapejobs_writer_lag_seconds") == 0
    assert value(samples, "scrapejobs_writer_dead_receipts") == 0


@pytest.mark.django_db(transaction=True)
def test_the_dispatchable_figures_leave_out_retries_in_backoff_deferrals_and_parked_jobs(make_tenant):
    """The scaling signal (FR-27): only the jobs a worker could start now count, each aged from
    when it became due; every priority has a series, 0 included."""
    tenant, _, _ = make_tenant(name="acme")
    due = helpers.queued(tenant, priority="high")  # never tried: due since intake
    Job.objects.filter(id=due.id).update(created_at=timezone.now() - timedelta(seconds=40))
    # A temporary failure: back to queued, waiting out its retry backoff (the target's
    # Retry-After is its floor).
    retrying = helpers.finish(
        helpers.running(tenant), outcome="failed_temporary", error_class="http_503", http_status=503,
        error="Service Unavailable", retry_after_s=600,
    )  # fmt: skip
    assert retrying.status == "queued" and retrying.not_before > timezone.now()
    Job.objects.filter(id=retrying.id).update(created_at=timezone.now() - timedelta(seconds=900))
    # Its domain refused it (a politeness deferral).
    deferred = helpers.queued(tenant)
    outbox_published_stamp(job_ids=[str(deferred.id)])
    assert job_defer_for_domain(job_id=deferred.id, wait_s=300, reason=WaitingFor.DOMAIN_RATE)
    Job.objects.filter(id=deferred.id).update(created_at=timezone.now() - timedelta(seconds=800))
    # Parked behind an identical job's fetch in flight (the elected one is running).
    elected, parked = (helpers.queued(tenant, url="http://a.example/same", max_age_s=60) for _ in range(2))
    decision = job_fetch_decide(job_id=elected.id)
    assert job_claim(job_id=elected.id, worker="w-test", fetch_key=decision.key) is not None
    assert job_fetch_decide(job_id=parked.id).kind == "parked"
    Job.objects.filter(id=parked.id).update(created_at=timezone.now() - timedelta(seconds=700))
    # A retry whose backoff ended 30 s ago: due since then, not since its intake.
    overdue = helpers.queued(tenant, priority="low")
    Job.objects.filter(id=overdue.id).update(
        created_at=timezone.now() - timedelta(seconds=600), not_before=timezone.now() - timedelta(seconds=30)
    )

    samples = scrape()

    assert value(samples, "scrapejobs_jobs", status="queued") == 5
    # time is the subject: an age gauge over every queued job, the oldest backdated 900 s
    assert value(samples, "scrapejobs_oldest_queued_job_age_seconds") > 800
    # time is the subject: an age gauge: the high job due since its intake 40 s ago
    # (the 900, 800 and 700 s old ones are not due, the 600 s one only 30 s); the margin covers the run
    assert 39 < value(samples, "scrapejobs_oldest_dispatchable_job_age_seconds") < 60
    assert value(samples, "scrapejobs_dispatchable_jobs", priority="high") == 1
    assert value(samples, "scrapejobs_dispatchable_jobs", priority="normal") == 0
    assert value(samples, "scrapejobs_dispatchable_jobs", priority="low") == 1

    Job.objects.filter(id=due.id).update(status="cancelled", finished_at=timezone.now())
    samples = scrape()
    # time is the subject: an age gauge: the retry due since its backoff
    # ended 30 s ago, not since its intake 600 s ago
    assert 29 < value(samples, "scrapejobs_oldest_dispatchable_job_age_seconds") < 40
    assert value(samples, "scrapejobs_dispatchable_jobs", priority="high") == 0

    # The rollup keeps the minute's reading for the dashboard's chart.
    rollup_run(settle_s=0)
    reading = GaugeMinute.objects.get()
    # time is the subject: the rollup keeps the same age as the gauge above (due 30 s ago)
    assert reading.dispatchable == 1 and 29 < reading.oldest_dispatchable_age_s < 40


@pytest.mark.django_db
def test_jobs_to_render_have_their_own_dispatchable_figures_for_the_browser_component(make_tenant):
    """The browser component scales on its own queue (FR-30): the rendered jobs a browser could
    start now, and the oldest of them; a plain job does not count there."""
    from tests.support.factories import job_make

    tenant, _, _ = make_tenant()
    plain = job_make(tenant, "http://a.example/plain")
    rendered = job_make(tenant, "http://a.example/page", render="browser", browser_options={})
    Job.objects.filter(id=plain.id).update(created_at=timezone.now() - timedelta(seconds=300))
    Job.objects.filter(id=rendered.id).update(created_at=timezone.now() - timedelta(seconds=50))
    later = job_make(tenant, "http://a.example/later", render="browser", browser_options={})
    Job.objects.filter(id=later.id).update(not_before=timezone.now() + timedelta(seconds=600))

    samples = scrape()

    assert value(samples, "scrapejobs_dispatchable_browser_jobs") == 1
    # time is the subject: an age gauge, read against a browser job
    # backdated 50 s (the 300 s plain one not counted)
    assert 49 < value(samples, "scrapejobs_oldest_dispatchable_browser_job_age_seconds") < 80
    # time is the subject: an age gauge over every kind, the plain job backdated 300 s
    assert value(samples, "scrapejobs_oldest_dispatchable_job_age_seconds") > 299


@pytest.mark.django_db
def test_an_empty_ledger_scrapes_as_zeros():
    samples = scrape()
    assert value(samples, "scrapejobs_jobs", status="queued") == 0
    assert value(samples, "scrapejobs_oldest_queued_job_age_seconds") == 0
    assert value(samples, "scrapejobs_oldest_dispatchable_job_age_seconds") == 0
    assert value(samples, "scrapejobs_dispatchable_jobs", priority="normal") == 0
    assert value(samples, "scrapejobs_dispatchable_browser_jobs") == 0
    assert value(samples, "scrapejobs_oldest_dispatchable_browser_job_age_seconds") == 0
    assert value(samples, "scrapejobs_jobs_running_past_lease") == 0
    assert value(samples, "scrapejobs_time_to_first_attempt_seconds_count") == 0


@pytest.mark.django_db
def test_attempt_counters_and_the_first_attempt_histogram_come_from_the_rollups_once_each(
    make_tenant, settings
):
    settings.SCRAPEJOBS_METRICS_DOMAINS = ["a.example"]
    tenant, _, _ = make_tenant()
    helpers.succeeded(tenant)
    helpers.finish(
        helpers.running(tenant), outcome="failed_temporary", error_class="timeout", error="timed out"
    )
    late = helpers.failed(tenant)
    Job.objects.filter(id=late.id).update(created_at=timezone.now() - timedelta(seconds=90))

    assert rollup_run(settle_s=0) == 3
    assert rollup_run(settle_s=0) == 0  # nothing new: nothing counted twice
    samples = scrape()

    assert value(samples, "scrapejobs_attempts_total", outcome="succeeded", error_class="") == 1
    assert value(samples, "scrapejobs_attempts_total", outcome="failed_temporary", error_class="timeout") == 1
    assert (
        value(samples, "scrapejobs_attempts_total", outcome="failed_permanent", error_class="http_404") == 1
    )
    assert value(samples, "scrapejobs_dead_letters_total", error_class="http_404") == 1
    assert value(samples, "scrapejobs_dead_letters_total", error_class="timeout") == 0
    assert value(samples, "scrapejobs_domain_attempts_total", domain="a.example") == 3
    assert value(samples, "scrapejobs_domain_failed_attempts_total", domain="a.example") == 2
    # A domain nobody named has no series of its own (/metrics does not grow with every host).
    settings.SCRAPEJOBS_METRICS_DOMAINS = []
    assert not [name for name, _labels in scrape() if name.startswith("scrapejobs_domain_")]
    # Three first attempts: two within 60 s, the one created 90 s before its claim above it.
    assert value(samples, "scrapejobs_time_to_first_attempt_seconds_count") == 3
    assert value(samples, "scrapejobs_time_to_first_attempt_seconds_bucket", le="60.0") == 2
    assert value(samples, "scrapejobs_time_to_first_attempt_seconds_bucket", le="120.0") == 3
    # time is the subject: a histogram's sum: about 90 s plus two short waits, within the test's run
    assert 85 < value(samples, "scrapejobs_time_to_first_attempt_seconds_sum") < 100


@pytest.mark.django_db
def test_a_running_attempt_holds_the_rollup_back_until_it_ends_then_both_count_once(make_tenant):
    tenant, _, _ = make_tenant()
    first = helpers.running(tenant)  # the lower attempt id, still running
    helpers.succeeded(tenant)

    assert rollup_run(settle_s=0) == 0
    assert ("scrapejobs_attempts_total", (("error_class", ""), ("outcome", "succeeded"))) not in scrape()

    helpers.finish(first)
    assert rollup_run(settle_s=0) == 2
    assert value(scrape(), "scrapejobs_attempts_total", outcome="succeeded", error_class="") == 2


@pytest.mark.django_db
def test_a_fresh_attempt_waits_for_the_settle_time_so_an_uncommitted_claim_is_never_skipped(make_tenant):
    tenant, _, _ = make_tenant()
    helpers.succeeded(tenant)
    assert rollup_run() == 0  # started less than 30 s ago
    Attempt.objects.update(started_at=timezone.now() - timedelta(seconds=31))
    assert rollup_run() == 1


@pytest.mark.django_db
def test_a_scrape_runs_the_same_queries_whatever_the_ledger_holds(make_tenant):
    tenant, _, _ = make_tenant()
    other, _, _ = make_tenant()
    helpers.succeeded(tenant)
    on_domain(tenant, "x.example")
    rollup_run(settle_s=0)
    with CaptureQueriesContext(connection) as small:
        scrape()
    for n in range(40):
        helpers.succeeded(tenant if n % 2 else other)
        on_domain(tenant, f"d{n}.example")
    rollup_run(settle_s=0)
    with CaptureQueriesContext(connection) as large:
        scrape()
    assert len(large.captured_queries) == len(small.captured_queries)
    statements = " ".join(q["sql"] for q in large.captured_queries)
    # Only bounded reads of the ledger: the queued and the running jobs, nothing by status at large.
    assert "GROUP BY status" not in statements
    assert "jobs_attempt" not in statements


@pytest.mark.django_db
def test_request_metrics_count_by_route_method_and_status_with_latency_histograms(make_tenant):
    client = Client()
    client.get("/healthz")
    client.get("/healthz")
    client.get("/api/v1/jobs")  # no token: 401
    client.get("/nowhere")

    samples = scrape(client)

    assert value(samples, "scrapejobs_http_requests_total", route="healthz", method="GET", status="200") == 2
    assert (
        value(samples, "scrapejobs_http_requests_total", route="api/v1/jobs", method="GET", status="401") == 1
    )
    assert (
        value(samples, "scrapejobs_http_requests_total", route="unmatched", method="GET", status="404") == 1
    )
    assert (
        value(samples, "scrapejobs_http_request_duration_seconds_count", route="healthz", method="GET") == 2
    )
    assert (
        value(
            samples,
            "scrapejobs_http_request_duration_seconds_bucket",
            route="healthz",
            method="GET",
            le="+Inf",
        )
        == 2
    )


@override_settings(SCRAPEJOBS_METRICS_TOKEN="s3cret", SCRAPEJOBS_METRICS_ALLOWED_NETWORKS=["127.0.0.0/8"])
@pytest.mark.django_db
def test_a_scrape_from_elsewhere_needs_the_bearer_token():
    remote = {"REMOTE_ADDR": "203.0.113.7"}
    refused = Client().get("/metrics", **remote)
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong", **remote).status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret", **remote).status_code == 200
    assert Client().get("/metrics").status_code == 200  # 127.0.0.1, an allowed network


@override_settings(SCRAPEJOBS_METRICS_TOKEN="", SCRAPEJOBS_METRICS_ALLOWED_NETWORKS=[])
@pytest.mark.django_db
def test_with_no_token_and_no_allowed_network_nobody_scrapes():
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_beat_runs_the_rollup_at_its_setting():
    with override_settings(SCRAPEJOBS_ROLLUP_INTERVAL_S=17.0):
        entry = _beat_schedule()["operators-rollup"]
    assert entry["task"] == "apps.operators.tasks.operators_rollup"
    assert entry["schedule"] == 17.0


@pytest.mark.e2e  # starts two web processes: not in make test-fast
@pytest.mark.django_db(transaction=True)
def test_requests_served_by_two_web_servers_all_reach_metrics_on_either(services):
    """Two gunicorn servers (two processes, as two hosts would be): each one's requests show in
    the other's /metrics, sent by each process's own flusher."""
    procs = services(SCRAPEJOBS_REQUEST_METRICS_FLUSH_S="0.2")
    one, other = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    for base in (one, other):
        procs.start("web", port=int(base.rsplit(":", 1)[1]), workers=1)
    for base in (one, other):
        wait_for(lambda base=base: _answers(f"{base}/healthz"), timeout=30, what=f"the web at {base}")
    time.sleep(1)  # five flush periods: the start-up probes above are in Redis before counting
    before = _healthz_count(one)
    for base, n in ((one, 5), (other, 20)):
        for _ in range(n):
            assert requests.get(f"{base}/healthz", timeout=5).status_code == 200
    wait_for(
        lambda: _healthz_count(one) == before + 25, timeout=10, what="25 more healthz requests in /metrics"
    )
    assert _healthz_count(other) == before + 25


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _healthz_count(base: str) -> float:
    text = requests.get(f"{base}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "scrapejobs_http_requests_total" and s.labels == {
                "route": "healthz",
                "method": "GET",
                "status": "200",
            }:
                return s.value
    return 0.0


def test_request_metrics_are_counted_under_asgi_too(db):
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    client = AsyncClient()
    for _ in range(3):
        assert async_to_sync(client.get)("/healthz").status_code == 200
    samples = scrape()
    assert value(samples, "scrapejobs_http_requests_total", route="healthz", method="GET", status="200") == 3


@pytest.mark.django_db
def test_the_rollup_and_scrape_statements_read_the_ledger_through_indexes_only():
    """On a ledger the planner knows is large (ANALYZE), no statement of the rollup or of a
    scrape scans jobs_job or jobs_attempt sequentially."""
    from apps.jobs import rollups
    from tests.support.big_ledger import ledger_build

    ledger_build(jobs=30_000, attempts_per_job=3, tenants=3, domains=20)
    params = {"after": 0, "upto": BATCH_ATTEMPTS, "limit": BATCH_ATTEMPTS, "settle_s": 30.0}
    plans = []
    with connection.cursor() as cur:
        for statement in (
            rollups._SETTLED_UPTO_SQL,
            rollups._GROUPS_SQL,
            rollups._TENANT_USAGE_SQL,
            rollups._FIRST_WAITS_SQL,
            rollups._QUEUED_SQL,
            rollups._RUNNING_SQL,
        ):
            cur.execute("EXPLAIN " + statement, params)
            plans.append("\n".join(row[0] for row in cur.fetchall()))
    for plan in plans:
        assert "Seq Scan on jobs_job" not in plan, plan
        assert "Seq Scan on jobs_attempt" not in plan, plan
    # The backlog read finds its rows through one of the two partial indexes that hold no succeeded
    # job: the covering backlog index (an index-only scan once VACUUM has set the visibility map)
    # or the admin's rare-status index. On a freshly COPYed ledger ANALYZE alone leaves the planner
    # costing both within a few units, and it picks either; both read only the queued entries.
    partial = r"Index (Only )?Scan using (jobs_queued_backlog|jobs_admin_rare_status_newest) on jobs_job"
    assert re.search(partial, plans[4]), plans[4]


@pytest.mark.django_db
def test_a_gap_in_attempt_ids_wider_than_a_batch_does_not_stall_the_rollup(make_tenant):
    tenant, _, _ = make_tenant()
    helpers.succeeded(tenant)
    rollup_run(settle_s=0)
    with connection.cursor() as cur:  # ids a rolled-back burst of claims would have used
        cur.execute(
            "SELECT setval(pg_get_serial_sequence('jobs_attempt', 'id'), "
            "(SELECT max(id) FROM jobs_attempt) + %s)",
            [3 * BATCH_ATTEMPTS],
        )
    helpers.succeeded(tenant)
    assert rollup_run(settle_s=0) == 1
