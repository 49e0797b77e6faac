"""/healthz, /readyz, /metrics: what operators and orchestrators probe (contract section 8)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from apps.jobs.models import Job
from tests.query import helpers


def test_healthz_answers_without_touching_the_database():
    # No django_db mark: any database access here would raise.
    r = Client().get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_is_200_when_the_database_and_redis_answer():
    r = Client().get("/readyz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}


@pytest.mark.django_db
def test_readyz_is_503_naming_redis_when_redis_is_unreachable():
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        r = Client().get("/readyz")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["redis"].startswith("error")


@pytest.mark.django_db
def test_metrics_reports_jobs_by_status_the_oldest_queued_age_and_expired_leases(make_tenant):
    tenant, _, _ = make_tenant()
    old = helpers.queued(tenant)
    Job.objects.filter(id=old.id).update(created_at=timezone.now() - timedelta(seconds=120))
    helpers.queued(tenant)
    stuck = helpers.running(tenant)
    Job.objects.filter(id=stuck.id).update(lease_expires_at=timezone.now() - timedelta(seconds=5))
    helpers.running(tenant)
    helpers.succeeded(tenant)
    r = Client().get("/metrics")
    assert r.status_code == 200
    assert r["Content-Type"].startswith("text/plain; version=0.0.4")
    text = r.content.decode()
    values = dict(re.findall(r"^(scrapejobs_\S+) (\S+)$", text, re.M))
    assert values['scrapejobs_jobs{status="queued"}'] == "2"
    assert values['scrapejobs_jobs{status="running"}'] == "2"
    assert values['scrapejobs_jobs{status="succeeded"}'] == "1"
    assert values['scrapejobs_jobs{status="failed"}'] == "0"
    assert values['scrapejobs_jobs{status="cancelled"}'] == "0"
    assert 119 < float(values["scrapejobs_oldest_queued_job_age_seconds"]) < 180
    assert values["scrapejobs_jobs_running_past_lease"] == "1"
    assert "# TYPE scrapejobs_jobs gauge" in text


@pytest.mark.django_db
def test_metrics_with_no_jobs_are_zero():
    values = dict(re.findall(r"^(scrapejobs_\S+) (\S+)$", Client().get("/metrics").content.decode(), re.M))
    assert values["scrapejobs_oldest_queued_job_age_seconds"] == "0.000"
    assert values["scrapejobs_jobs_running_past_lease"] == "0"


@pytest.mark.django_db
def test_probes_need_no_token_and_refuse_writes():
    assert Client().post("/healthz").status_code == 405
    assert Client().get("/metrics").status_code == 200
