"""The outbox publisher against the real database and the real Redis broker."""

import base64
import json
import threading
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.db import connections
from django.utils import timezone
from kombu.exceptions import KombuError

from apps.jobs.intake import job_create, publisher_nudge
from apps.jobs.models import Job
from apps.jobs.nudges import NUDGES, PUBLISH
from apps.publishing.publisher import outbox_publish, outbox_publish_batch
from apps.redis_clients import state_redis
from apps.tenants.models import Tenant
from tests.support.procs import wait_for


def _broker() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


def _queued_ids(queue: str) -> list[str]:
    """Job ids of the scrape messages waiting in ``queue`` (kombu's Redis transport: a list)."""
    ids = []
    for raw in _broker().lrange(queue, 0, -1):
        message = json.loads(raw)
        assert message["headers"]["task"] == "apps.scraping.tasks.scrape_job"
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        ids.append(args[0])
    return ids


def _jobs(tenant, n, **kw):
    return [
        job_create(tenant_id=tenant.id, url=f"http://example.test/{i}", domain="example.test", **kw)[0]
        for i in range(n)
    ]


@pytest.mark.django_db
def test_each_unpublished_job_is_sent_once_and_stamped(make_tenant):
    tenant, _, _ = make_tenant()
    jobs = _jobs(tenant, 3)
    assert outbox_publish_batch(limit=10) == 3
    assert sorted(_queued_ids("jobs.normal")) == sorted(str(j.id) for j in jobs)
    assert Job.objects.filter(published_at__isnull=True).count() == 0
    assert outbox_publish_batch(limit=10) == 0
    assert _broker().llen("jobs.normal") == 3


@pytest.mark.django_db
def test_a_message_carries_the_domain_and_timeout_the_workers_gate_needs(make_tenant):
    # the worker's politeness gate runs before the claim; with these in the message it
    # reads nothing from PostgreSQL before the claim.
    # A job that takes no stored result says so (FR-15): its worker then skips the single-flight
    # read and claims at once; one that may be served one has its decision read as before.
    # Its priority, tenant and tenant weight are its place in its domain's line (NFR-9, NFR-10).
    tenant, _, _ = make_tenant()
    Tenant.objects.filter(id=tenant.id).update(weight=3)
    job = job_create(tenant_id=tenant.id, url="http://shop.test/a", domain="shop.test", timeout_s=17)[0]
    aged = job_create(tenant_id=tenant.id, url="http://shop.test/b", domain="shop.test", max_age_s=60)[0]
    outbox_publish_batch(limit=10)
    messages = {}
    for raw in _broker().lrange("jobs.normal", 0, -1):
        args, kwargs, _embed = json.loads(base64.b64decode(json.loads(raw)["body"]))
        messages[args[0]] = kwargs
    share = {"priority": "normal", "tenant": str(tenant.id), "weight": 3}
    assert messages == {
        str(job.id): {"domain": "shop.test", "timeout_s": 17, "max_age_s": 0, **share},
        str(aged.id): {"domain": "shop.test", "timeout_s": 30, **share},
    }


@pytest.mark.django_db
def test_a_job_goes_to_the_queue_of_its_priority(make_tenant):
    tenant, _, _ = make_tenant()
    (high,) = _jobs(tenant, 1, priority="high")
    (low,) = _jobs(tenant, 1, priority="low")
    outbox_publish_batch(limit=10)
    assert _queued_ids("jobs.high") == [str(high.id)] and _queued_ids("jobs.low") == [str(low.id)]
    assert _broker().llen("jobs.normal") == 0


@pytest.mark.django_db
def test_a_job_waiting_for_its_retry_time_is_not_sent_until_then(make_tenant):
    tenant, _, _ = make_tenant()
    later, due = _jobs(tenant, 2)
    Job.objects.filter(id=later.id).update(not_before=timezone.now() + timedelta(hours=1))
    Job.objects.filter(id=due.id).update(not_before=timezone.now() - timedelta(seconds=1))
    assert outbox_publish_batch(limit=10) == 1
    assert _queued_ids("jobs.normal") == [str(due.id)]
    assert Job.objects.get(id=later.id).published_at is None


@pytest.mark.django_db
def test_a_run_publishes_batch_after_batch_until_the_outbox_is_empty(make_tenant):
    tenant, _, _ = make_tenant()
    _jobs(tenant, 25)
    assert outbox_publish(batch_size=10, budget_s=30) == 25
    assert _broker().llen("jobs.normal") == 25


@pytest.mark.django_db(transaction=True)
def test_concurrent_publishers_never_send_a_job_twice(make_tenant):
    tenant, _, _ = make_tenant()
    jobs = _jobs(tenant, 300)
    _broker().flushdb()  # drop the intake nudges: only scrape messages are counted
    start = threading.Barrier(3)
    sent: list[int] = []

    def publisher() -> None:
        try:
            start.wait()
            while (n := outbox_publish_batch(limit=20)) > 0:
                sent.append(n)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=publisher) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    ids = _queued_ids("jobs.normal")
    assert sum(sent) == 300 and len(ids) == 300
    assert sorted(ids) == sorted(str(j.id) for j in jobs)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_an_accepted_job_is_published_at_once_by_the_nudge_with_no_beat_running(services, make_tenant):
    # apps.jobs.nudges: intake's nudge reaches the control process's listener, no broker message.
    tenant, _, _ = make_tenant()
    services().start("control")
    first = _jobs(tenant, 1)[0]
    wait_for(
        lambda: (
            Job.objects.filter(id=first.id, published_at__isnull=False).exists()
            or (publisher_nudge() and False)
        ),
        timeout=90,
        interval=0.5,
        what="the control process to start and publish",
    )
    (job,) = _jobs(tenant, 1)
    wait_for(
        lambda: Job.objects.filter(id=job.id, published_at__isnull=False).exists(),
        timeout=5,
        interval=0.02,
        what="the nudged publisher",
    )
    assert state_redis().zscore(NUDGES, PUBLISH) is None


@pytest.mark.django_db
def test_a_batchs_messages_go_to_the_broker_in_one_round_trip(make_tenant, monkeypatch):
    # NFR-11: the publisher's sends are pipelined (kombu's publish batch), one round trip for
    # the batch however many jobs it sends, not one per job.
    import redis.connection

    tenant, _, _ = make_tenant()
    _jobs(tenant, 1)
    assert outbox_publish_batch(limit=10) == 1  # the queue declared, the connections made
    jobs = _jobs(tenant, 5, priority="high") + _jobs(tenant, 4)
    sent: list[bytes] = []
    send = redis.connection.AbstractConnection.send_packed_command

    def counting(self, command, check_health=True):
        packed = b"".join(command) if isinstance(command, list) else bytes(command)
        if b"LPUSH" in packed:
            sent.append(packed)
        return send(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    assert outbox_publish_batch(limit=10) == 9
    assert len(sent) == 1 and sent[0].count(b"LPUSH") == 9
    assert sorted(_queued_ids("jobs.high") + _queued_ids("jobs.normal")[:-1]) == sorted(
        str(j.id) for j in jobs
    )


@pytest.mark.django_db
def test_a_batch_the_broker_did_not_take_is_not_stamped_and_goes_again(make_tenant, monkeypatch):
    # At-least-once (NFR-1): the pipelined send fails as a whole before the stamp, so every job
    # of the batch stays unpublished and the next run sends it.
    import redis.client

    tenant, _, _ = make_tenant()
    jobs = _jobs(tenant, 3)
    execute = redis.client.Pipeline.execute

    def refused(self, *args, **kwargs):
        if any(b"LPUSH" in str(c[0][0]).encode() for c in self.command_stack):
            raise redis.ConnectionError("the broker went away")
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", refused)
    with pytest.raises(KombuError, match="delivery is uncertain"):  # kombu's BatchPublishError
        outbox_publish_batch(limit=10)
    assert Job.objects.filter(published_at__isnull=True).count() == 3
    assert _broker().llen("jobs.normal") == 0
    monkeypatch.setattr(redis.client.Pipeline, "execute", execute)
    assert outbox_publish_batch(limit=10) == 3
    assert sorted(_queued_ids("jobs.normal")) == sorted(str(j.id) for j in jobs)
