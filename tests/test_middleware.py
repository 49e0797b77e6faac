"""scrapejobs/middleware.py: the API skips the browser middleware (sessions, CSRF, user,
messages), the admin keeps all of it (per-request cost of POST /jobs)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db


def test_an_api_request_builds_no_session_user_or_message_store(api):
    r = api.post("/api/v1/jobs", {"url": "http://a.example/"}, format="json")
    assert r.status_code == 202
    request = r.wsgi_request
    assert not hasattr(request, "session")
    assert not hasattr(request, "_messages")
    assert "CSRF_COOKIE" not in request.META
    assert "Set-Cookie" not in r and "Cookie" not in r.get("Vary", "")


def test_the_admin_still_has_sessions_csrf_users_and_messages():
    get_user_model().objects.create_superuser("root", "root@example.test", "pw")
    browser = Client(enforce_csrf_checks=True)
    page = browser.get("/admin/login/")
    token = page.cookies["csrftoken"].value
    refused = browser.post("/admin/login/", {"username": "root", "password": "pw"})
    assert refused.status_code == 403  # no CSRF token: refused
    r = browser.post(
        "/admin/login/?next=/admin/",
        {"username": "root", "password": "pw", "csrfmiddlewaretoken": token},
        follow=True,
    )
    assert r.status_code == 200
    assert r.wsgi_request.user.is_authenticated
    assert "sessionid" in browser.cookies


@pytest.mark.django_db(transaction=True)
def test_under_asgi_securitys_commons_and_x_frames_hooks_run_on_the_event_loop(make_tenant, monkeypatch):
    """Django's MiddlewareMixin gives each hook of these three a thread hop under ASGI (two per
    middleware per request, most of a cached GET /jobs/{id}'s cost); ours run them on
    the loop, and their headers and redirects are still there."""
    import asyncio
    import threading

    from django.middleware import clickjacking, common, security
    from django.test import AsyncClient

    threads: dict[str, set[int]] = {}

    def recording(name, hook):
        def run(self, *args):
            threads.setdefault(name, set()).add(threading.get_ident())
            return hook(self, *args)

        return run

    for cls, hooks in (
        (security.SecurityMiddleware, ("process_request", "process_response")),
        (common.CommonMiddleware, ("process_request", "process_response")),
        (clickjacking.XFrameOptionsMiddleware, ("process_response",)),
    ):
        for hook in hooks:
            monkeypatch.setattr(cls, hook, recording(f"{cls.__name__}.{hook}", getattr(cls, hook)))
    _, token, _ = make_tenant()

    async def requests():
        client = AsyncClient()
        auth = {"Authorization": f"Bearer {token}"}
        loop_thread = threading.get_ident()
        created = await client.post(
            "/api/v1/jobs", {"url": "http://a.example/"}, content_type="application/json", headers=auth
        )
        assert created.status_code == 202, created.content
        read = await client.get(f"/api/v1/jobs/{created.json()['id']}", headers=auth)
        admin = await client.get("/admin")  # CommonMiddleware's APPEND_SLASH
        return loop_thread, created, read, admin

    loop_thread, created, read, admin = asyncio.run(requests())
    assert (created.status_code, read.status_code) == (202, 200)
    for r in (created, read):
        assert r["X-Content-Type-Options"] == "nosniff"
        assert r["X-Frame-Options"] == "DENY"
        assert r["Referrer-Policy"] == "same-origin"
        assert r["Content-Length"] == str(len(r.content))
    assert (admin.status_code, admin["Location"]) == (301, "/admin/")
    assert len(threads) == 5, threads
    assert all(seen == {loop_thread} for seen in threads.values()), (loop_thread, threads)
