"""FR-W3: one active writer at a time, elected by a Redis lease that only its holder can renew or
release."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

from apps.redis_clients import state_redis
from apps.writer.lease import Lease
from apps.writer.streams import LEASE_KEY
from apps.writer.submit import receipt_submit
from tests.support.procs import Proc, service_env, wait_for
from tests.writer.helpers import RunningJob, new_id, receipt, running_jobs_create


def test_only_the_holders_token_renews_or_releases_the_lease() -> None:
    """FR-W3: a second candidate cannot take, renew or release a held lease; once the holder's
    renewals stop (a dead process), the lease lapses after its TTL and the other takes it."""
    r = state_redis()
    first = Lease(r, key="sj:test:lease", ttl_ms=600, owner="a")
    other = Lease(r, key="sj:test:lease", ttl_ms=600, owner="b")
    assert first.acquire()
    try:
        assert not other.acquire()
        assert not other.renew()
        assert not other.release()
        assert r.get("sj:test:lease") == first.token
        time.sleep(1.0)  # longer than the TTL: the heartbeat kept it
        assert r.get("sj:test:lease") == first.token
        assert first.held
    finally:
        assert first.release()
    assert r.get("sj:test:lease") is None

    # A holder that dies (no heartbeat, no release): the lease lapses after its TTL.
    assert r.set("sj:test:lease", "dead-holder", nx=True, px=300)
    assert not other.acquire()
    wait_for(other.acquire, timeout=2, interval=0.02, what="the dead holder's lease to lapse")
    other.release()


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_two_writer_processes_started_together_never_hold_the_lease_at_once() -> None:
    """FR-W3: two `writer_run` processes flushing every 50 ms against a steady stream of
    receipts; each logs the periods it held the lease. Over hundreds of flushes both got the
    lease many times and no two periods overlap."""
    specs = [RunningJob(id=new_id(), attempt=1, max_attempts=5) for _ in range(200)]
    running_jobs_create(specs)
    r = state_redis()
    trace = "sj:test:lease-trace"
    env = service_env(SCRAPEJOBS_WRITER_LEASE_TTL_S="2", SCRAPEJOBS_DATABASE_WRITER_CONCURRENCY="2")
    argv = [sys.executable, "manage.py", "writer_run", "--interval", "0.05", "--trace-key", trace]
    writers = [Proc(f"writer_run-{i}", argv, env) for i in range(2)]
    stop = threading.Event()

    def feed() -> None:
        # Receipts for an attempt the jobs never reached: every batch does real SQL, moves nothing.
        n = 0
        while not stop.is_set():
            for s in specs[n % 10 :: 10]:
                receipt_submit(receipt(s.id, 99, "failed_temporary"))
            n += 1
            # time is the subject: receipts arrive at a steady rate while the writers run
            time.sleep(0.01)

    feeder = threading.Thread(target=feed, daemon=True)
    try:
        for w in writers:
            w.start()
        feeder.start()
        wait_for(lambda: r.llen(trace) >= 300, timeout=90, interval=0.2, what="300 lease periods")
    finally:
        stop.set()
        feeder.join()
        for w in writers:
            w.stop()
    periods = sorted(json.loads(p) for p in r.lrange(trace, 0, -1))
    periods = sorted(periods, key=lambda p: p[1])
    holders = [p[0].rsplit(":", 1)[0] for p in periods]  # host:pid (the token adds a nonce)
    counts = {h: holders.count(h) for h in set(holders)}
    assert len(counts) == 2 and min(counts.values()) >= 20, counts
    overlaps = [(a, b) for a, b in zip(periods, periods[1:], strict=False) if b[1] < a[2]]
    assert overlaps == [], overlaps[:3]
    assert r.get(LEASE_KEY) is None  # both released on exit
