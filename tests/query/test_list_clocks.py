"""A cursor walk of GET /jobs (FR-3) with two web hosts whose clocks differ by ten minutes: each
mints job ids from its own clock (apps/jobs/ids.py), so ids no longer follow the order jobs were
accepted in. The walk still returns every job committed before its first page was served,
exactly once, in strictly descending id order; a job accepted during the walk appears at most
once, and only when its id is below the cursor (docs/design/waiting-and-read-cache.md states the
limit). Real web processes (one with a skewed clock, tests/support/clock_skew), real PostgreSQL."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import requests

from apps.jobs.models import Job
from tests.support.net import free_port
from tests.support.procs import wait_for_web

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SKEW_DIR = Path(__file__).resolve().parents[1] / "support" / "clock_skew"
SKEW_S = -600  # the second host's clock is ten minutes behind


def _minted_at_ms(job_id: str) -> int:
    return uuid.UUID(job_id).int >> 80


def test_a_walk_returns_every_job_committed_before_it_whatever_each_hosts_clock(services, make_tenant):
    svc = services()
    ports = [free_port(), free_port()]
    on_time = svc.start("web", port=ports[0], workers=1)
    behind = svc.start(
        "web",
        port=ports[1],
        workers=1,
        env={"PYTHONPATH": str(SKEW_DIR), "SCRAPEJOBS_TEST_CLOCK_SKEW_S": str(SKEW_S)},
    )
    _, token, _ = make_tenant()
    auth = {"Authorization": f"Bearer {token}"}
    for proc, port in ((on_time, ports[0]), (behind, ports[1])):
        wait_for_web(proc, port)
    hosts = [f"http://127.0.0.1:{port}/api/v1/jobs" for port in ports]

    def submit(host: str, n: int) -> str:
        r = requests.post(host, json={"url": f"http://t.example/{n}"}, headers=auth, timeout=10)
        assert r.status_code == 202, r.text
        return r.json()["id"]

    # Alternating hosts: the later jobs of the host behind get ids older than earlier ones.
    before = [submit(hosts[i % 2], i) for i in range(40)]
    minted = {h: [_minted_at_ms(j) for j in before[h::2]] for h in (0, 1)}
    assert max(minted[1]) < min(minted[0]) - 500_000  # the skew took effect: ids ~10 min apart

    seen: list[str] = []
    during: list[str] = []
    cursor = None
    page = 0
    while True:
        params = {"limit": 7, **({"cursor": cursor} if cursor else {})}
        r = requests.get(hosts[page % 2], params=params, headers=auth, timeout=10)  # both hosts serve it
        assert r.status_code == 200, r.text
        body = r.json()
        seen += [item["id"] for item in body["items"]]
        # Jobs accepted while the walk goes on, on both hosts.
        during += [submit(hosts[0], 100 + page), submit(hosts[1], 200 + page)]
        page += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break

    assert len(seen) == len(set(seen)), "a job was listed twice"
    assert [uuid.UUID(i) for i in seen] == sorted((uuid.UUID(i) for i in seen), reverse=True)
    assert set(before) <= set(seen), f"skipped: {set(before) - set(seen)}"
    # What else the walk showed were jobs accepted during it, by the host behind (ids below the
    # cursor); the on-time host's were all newer than any cursor.
    extra = set(seen) - set(before)
    assert extra <= set(during[1::2])
    assert not extra & set(during[0::2])
    assert Job.objects.count() == len(before) + len(during)
