"""Probes and metrics for operators: plain Django views (no DRF, no token, no rate limit)."""

from __future__ import annotations

import functools

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from apps.jobs.selectors import jobs_counts


@functools.cache
def _probe_redis(url: str) -> redis.Redis:
    """Short timeouts and no retries, unlike the service's client: a probe must answer within
    the orchestrator's probe timeout even when Redis hangs."""
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2, retry=None)


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: the process answers. Touches nothing else, so a database outage does not get
    every web process restarted."""
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness: PostgreSQL answers SELECT 1 and Redis answers PING; 503 names what failed."""
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchone()
        checks["database"] = "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        checks["database"] = f"error: {exc.__class__.__name__}"
    try:
        _probe_redis(settings.REDIS_URL).ping()
        checks["redis"] = "ok"
    except Exception as exc:  # noqa: BLE001
        checks["redis"] = f"error: {exc.__class__.__name__}"
    ready = all(v == "ok" for v in checks.values())
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503
    )


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format: jobs by status, age of the oldest queued job, running jobs past
    their lease (their worker is gone; the sweeper will requeue them)."""
    counts = jobs_counts()
    lines = [
        "# HELP scrapejobs_jobs Jobs by status.",
        "# TYPE scrapejobs_jobs gauge",
        *(f'scrapejobs_jobs{{status="{s}"}} {n}' for s, n in counts.by_status.items()),
        "# HELP scrapejobs_oldest_queued_job_age_seconds Age of the oldest queued job (0 when none).",
        "# TYPE scrapejobs_oldest_queued_job_age_seconds gauge",
        f"scrapejobs_oldest_queued_job_age_seconds {max(counts.oldest_queued_age_s, 0.0):.3f}",
        "# HELP scrapejobs_jobs_running_past_lease Running jobs whose lease has expired.",
        "# TYPE scrapejobs_jobs_running_past_lease gauge",
        f"scrapejobs_jobs_running_past_lease {counts.running_past_lease}",
    ]
    return HttpResponse("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4; charset=utf-8")
