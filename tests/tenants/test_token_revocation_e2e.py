"""A revoked token is refused by every web process as its revocation notice arrives (FR-36): two
real web processes (gunicorn, uvicorn workers), each holding the token in its cache for 300 s; the
revocation reaches the other one through the LISTEN connection its ``?wait=`` listener holds
(apps/query/waiting.py), not after the cache's 300 s."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from django.db import connection

from apps.tenants.services import TOKEN_REVOKED_CHANNEL
from tests.support.net import free_port
from tests.support.procs import wait_for, wait_for_web

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def _listeners() -> int:
    """Backends whose last statement LISTENed on the revocation channel: one per web process."""
    with connection.cursor() as cur:
        cur.execute(
            # Not this backend: its own query text holds the pattern too.
            "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE %s",
            [f'%LISTEN "{TOKEN_REVOKED_CHANNEL}"%'],
        )
        return int(cur.fetchone()[0])


def test_a_token_revoked_on_one_web_process_is_refused_at_once_by_another(services, make_tenant):
    env = {"SCRAPEJOBS_TOKEN_CACHE_S": "300"}
    running = services()
    bases = []
    for _ in range(2):
        port = free_port()
        wait_for_web(running.start("web", port=port, workers=1, env=env), port)
        bases.append(f"http://127.0.0.1:{port}/api/v1")
    wait_for(lambda: _listeners() >= 2, timeout=30, what="both web processes listening")
    one, other = bases
    _, first, _ = make_tenant()

    def call(base: str, token: str, method: str = "GET", path: str = "/jobs", **kw: Any) -> requests.Response:
        return requests.request(
            method, base + path, headers={"Authorization": f"Bearer {token}"}, timeout=30, **kw
        )

    made = call(one, first, "POST", "/tokens", json={"name": "rotation", "scope": "admin"})
    assert made.status_code == 201, made.text
    second = made.json()["token"]
    first_id = next(
        t["id"] for t in call(one, second, path="/tokens").json()["items"] if t["id"] != made.json()["id"]
    )
    for base in bases:  # both processes hold the first token in their cache now
        assert call(base, first).status_code == 200

    revoked = call(one, second, "DELETE", f"/tokens/{first_id}")
    assert revoked.status_code == 204, revoked.text
    # The revocation's answer came back: the other process refuses the first token as soon as
    # the notice reaches its listener. PostgreSQL sends it to every listening backend at the
    # commit, before the 204 is answered, and each passes it on when the scheduler runs it: a few
    # milliseconds, once (a parallel run at a load of 12) long enough for the next request to
    # overtake it. So the refusal is waited for, within a bound no real delay comes near.
    seen: list[int] = []
    wait_for(
        lambda: seen.append(call(other, first).status_code) or seen[-1] == 401,
        timeout=5,
        interval=0.01,
        what="the other web process to refuse the revoked token",
    )
    refused = call(other, first)
    assert refused.status_code == 401, refused.text
    assert set(seen[:-1]) <= {200}, seen  # before the notice: the cached token; never another answer
    assert refused.json()["code"] == "authentication_failed"
    assert call(one, first).status_code == 401
    for base in bases:
        assert call(base, second).status_code == 200

    # A read token's batch is refused before its body is read (scrapejobs/asgi.py), with the 403.
    reader = call(one, second, "POST", "/tokens", json={"name": "reader", "scope": "read"}).json()["token"]
    refused = call(one, reader, "POST", "/batches", json=[{"url": "http://a.example/"}])
    assert refused.status_code == 403 and refused.json()["code"] == "token_scope_insufficient", refused.text
