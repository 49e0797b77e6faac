"""Rendered jobs are dispatched apart (NFR-31): to ``jobs.browser``, within their own free room
(SCRAPEJOBS_BROWSER_DISPATCH_DEPTH), with 6:3:1 inside it, never holding up plain jobs."""

from __future__ import annotations

import base64
import json
from collections import Counter

import pytest
import redis
from django.conf import settings

from apps.jobs.intake import job_create
from apps.jobs.models import Job
from apps.publishing.publisher import outbox_publish_batch

pytestmark = pytest.mark.django_db

OPTIONS: dict[str, object] = {
    "wait_until": "load",
    "wait_for_selector": None,
    "screenshot": False,
    "viewport": {},
    "block": [],
}


def _broker() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


def _ids(queue: str) -> list[str]:
    ids = []
    for raw in reversed(_broker().lrange(queue, 0, -1)):
        args, _kwargs, _embed = json.loads(base64.b64decode(json.loads(raw)["body"]))
        ids.append(args[0])
    return ids


def _jobs(tenant, n: int, *, render: str, priority: str = "normal") -> list[str]:
    made = []
    for i in range(n):
        job, _ = job_create(
            tenant_id=tenant.id,
            url=f"http://example.test/{render}/{priority}/{i}",
            domain="example.test",
            priority=priority,
            render=render,
            browser_options=OPTIONS if render == "browser" else None,
        )
        made.append(str(job.id))
    return made


def test_rendered_jobs_go_to_their_own_queue_within_their_own_depth(make_tenant):
    tenant = make_tenant()[0]
    plain = _jobs(tenant, 5, render="none")
    rendered = _jobs(tenant, 5, render="browser")
    sent = outbox_publish_batch(limit=100, depth=300, browser_depth=2)
    assert sent == 7
    assert sorted(_ids("jobs.normal")) == sorted(plain)  # plain jobs never wait behind renders
    on_browser = _ids("jobs.browser")
    assert len(on_browser) == 2 and set(on_browser) <= set(rendered)
    # The browser queue is full: another batch sends nothing more to it.
    assert outbox_publish_batch(limit=100, depth=300, browser_depth=2) == 0
    assert Job.objects.filter(render="browser", published_at__isnull=True).count() == 3


def test_a_full_plain_broker_does_not_hold_up_rendered_jobs(make_tenant):
    tenant = make_tenant()[0]
    _jobs(tenant, 3, render="none")
    assert outbox_publish_batch(limit=100, depth=3, browser_depth=4) == 3
    rendered = _jobs(tenant, 2, render="browser")
    _jobs(tenant, 2, render="none")
    assert outbox_publish_batch(limit=100, depth=3, browser_depth=4) == 2
    assert sorted(_ids("jobs.browser")) == sorted(rendered)


def test_priorities_keep_their_weights_inside_the_browser_queue(make_tenant):
    tenant = make_tenant()[0]
    by_priority = {p: set(_jobs(tenant, 20, render="browser", priority=p)) for p in ("high", "normal", "low")}
    assert outbox_publish_batch(limit=100, depth=300, browser_depth=10) == 10
    sent = Counter(next(p for p, ids in by_priority.items() if i in ids) for i in _ids("jobs.browser"))
    assert sent == {"high": 6, "normal": 3, "low": 1}
