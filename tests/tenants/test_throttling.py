"""The per-token rate limit fails open (NFR-1): without Redis a request passes at once,
a warning says so (not once per request), and Redis is not tried again for a moment."""

from __future__ import annotations

import json
import logging
import socket
import time

import pytest
from django.test import override_settings

from apps.jobs.models import Job
from apps.tenants import throttling

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs"


@pytest.fixture
def nothing_listening() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


@pytest.fixture(autouse=True)
def _redis_not_paused():
    throttling._redis_down_until = 0.0
    yield
    throttling._redis_down_until = 0.0


def test_without_redis_submissions_pass_unlimited_and_one_warning_is_logged(
    make_tenant, nothing_listening, caplog
):
    _, _, api = make_tenant(rate_limit_per_second=1)
    with override_settings(REDIS_URL=nothing_listening, SCRAPEJOBS_RATE_LIMIT_BURST=1):
        with caplog.at_level(logging.WARNING, logger="apps.tenants.throttling"):
            started = time.monotonic()
            codes = [
                api.post(
                    JOBS, json.dumps({"url": f"http://a.example/{i}"}), content_type="application/json"
                ).status_code
                for i in range(5)
            ]
            took = time.monotonic() - started
    assert codes == [202] * 5  # a burst of 1 at 1/s would refuse four of them with Redis up
    assert Job.objects.count() == 5
    # time is the subject: without Redis five submissions take under 1 s,
    # where waiting for a token at 1/s would take 4 s
    assert took < 1.0
    warnings = [r.getMessage() for r in caplog.records if r.name == "apps.tenants.throttling"]
    assert len(warnings) == 1 and "Redis unreachable" in warnings[0]


def test_after_a_failure_redis_is_left_alone_for_a_moment_then_tried_again(make_tenant, nothing_listening):
    tenant, _, _ = make_tenant(rate_limit_per_second=1)
    principal = type("P", (), {"tenant": tenant, "token": tenant.tokens.get()})()
    with override_settings(REDIS_URL=nothing_listening):
        assert throttling.token_rate_take(principal) == (True, 0.0)
        paused_until = throttling._redis_down_until
        assert paused_until > time.monotonic()
        assert throttling.token_rate_take(principal) == (True, 0.0)
        assert throttling._redis_down_until == paused_until  # not even tried
    throttling._redis_down_until = 0.0
    with override_settings(SCRAPEJOBS_RATE_LIMIT_BURST=1):
        assert throttling.token_rate_take(principal) == (True, 0.0)  # Redis is back: the limit holds
        allowed, wait = throttling.token_rate_take(principal)
        assert not allowed and wait > 0


def test_fail_closed_refuses_what_it_cannot_check_and_changes_nothing(make_tenant, nothing_listening):
    """SCRAPEJOBS_RATE_LIMIT_FAIL_CLOSED: an operator who prefers refusing to serving unlimited
    gets a 429 with Retry-After while Redis is away, and no job is created."""
    _, _, api = make_tenant(rate_limit_per_second=1)
    with override_settings(REDIS_URL=nothing_listening, SCRAPEJOBS_RATE_LIMIT_FAIL_CLOSED=True):
        answers = [
            api.post(JOBS, json.dumps({"url": f"http://a.example/{i}"}), content_type="application/json")
            for i in range(3)
        ]
    assert [a.status_code for a in answers] == [429] * 3
    assert {a["Retry-After"] for a in answers} == {"1"}
    assert Job.objects.count() == 0
    throttling._redis_down_until = 0.0
    ok = api.post(JOBS, json.dumps({"url": "http://a.example/back"}), content_type="application/json")
    assert ok.status_code == 202  # Redis is back: the limit is checked again


def test_the_bucket_keeps_redis_time_not_the_web_hosts_clock(make_tenant, monkeypatch):
    """Two web hosts whose clocks differ share one bucket: a host a minute ahead must not refill it
    (before: the script trusted the caller's time.time())."""
    tenant, _, _ = make_tenant(rate_limit_per_second=1)
    principal = type("P", (), {"tenant": tenant, "token": tenant.tokens.get()})()
    with override_settings(SCRAPEJOBS_RATE_LIMIT_BURST=1):
        assert throttling.token_rate_take(principal)[0]
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 60)  # the other host's clock
        allowed, wait = throttling.token_rate_take(principal)
    assert not allowed and 0 < wait <= 1.0
