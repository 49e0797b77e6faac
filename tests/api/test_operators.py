"""/healthz, /readyz, /metrics: what operators and orchestrators probe (FR-9, FR-14). What
/metrics reports, and who may read it, is in tests/operators/test_metrics.py."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings


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
def test_probes_need_no_token_and_refuse_writes():
    assert Client().post("/healthz").status_code == 405
    assert Client().get("/metrics").status_code == 200
