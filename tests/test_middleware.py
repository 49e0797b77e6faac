"""scrapejobs/middleware.py: the API skips the browser middleware (sessions, CSRF, user,
messages), the admin keeps all of it (issue 7: per-request cost of POST /jobs)."""

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
