"""Probes, metrics and the dashboard for operators: plain Django views (no DRF, no API token, no
rate limit). /metrics is guarded by its own setting, the dashboard by the admin's staff login."""

from __future__ import annotations

import functools
import hmac
import ipaddress

import redis
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from apps.operators.dashboard import DEFAULT_WINDOW, WINDOWS, dashboard_charts
from apps.operators.live import dashboard_now
from apps.operators.metrics import metrics_registry
from apps.outbound.proxy_status import egress_proxy_auth_failure_get


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
    probe = _probe_redis(settings.REDIS_URL)
    try:
        probe.ping()
        checks["redis"] = "ok"
    except Exception as exc:  # noqa: BLE001
        checks["redis"] = f"error: {exc.__class__.__name__}"
    ready = all(v == "ok" for v in checks.values())
    body: dict[str, object] = {"status": "ok" if ready else "unavailable", "checks": checks}
    # A proxy refusing its credentials (FR-28) is said here but does not make the web unready:
    # intake does not depend on it (NFR-1), and an orchestrator would only take the API away.
    if ready:
        try:
            proxy = egress_proxy_auth_failure_get(r=probe)
        except Exception:  # noqa: BLE001 - the answer stands without it
            proxy = None
        if proxy is not None:
            body["warnings"] = {"egress_proxy": proxy}
    return JsonResponse(body, status=200 if ready else 503)


def metrics_allowed(request: HttpRequest) -> bool:
    """A scrape carrying the bearer token SCRAPEJOBS_METRICS_TOKEN, or one from a network in
    SCRAPEJOBS_METRICS_ALLOWED_NETWORKS."""
    token = settings.SCRAPEJOBS_METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return True
    try:
        client = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(
        client in ipaddress.ip_network(n, strict=False) for n in settings.SCRAPEJOBS_METRICS_ALLOWED_NETWORKS
    )


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format (apps/operators/metrics.py says what and at what cost)."""
    if not metrics_allowed(request):
        response = HttpResponse(
            "metrics need `Authorization: Bearer <SCRAPEJOBS_METRICS_TOKEN>` from this address\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(metrics_registry()), content_type=CONTENT_TYPE_LATEST)


@require_GET
@staff_member_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """Charts of what operators watch (FR-9, FR-14) over a window of 1 h, 24 h or 7 d."""
    name = request.GET.get("window", DEFAULT_WINDOW)
    if name not in WINDOWS:
        return HttpResponse(
            f"Unknown window {name!r}: use one of {', '.join(WINDOWS)}.\n",
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    charts = dashboard_charts(window=WINDOWS[name])
    context = {
        **admin.site.each_context(request),
        "title": "Dashboard",
        "window": name,
        "windows": list(WINDOWS),
        "now": dashboard_now(),
        "charts": charts,
        "charts_data": [c.as_dict() for c in charts],
    }
    return render(request, "operators/dashboard.html", context)
