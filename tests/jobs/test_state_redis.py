"""The state Redis client of a process (apps/redis_clients.py) with more callers at once than its
pool has connections: a worker of 1,000 slots (NFR-18) has them. They wait for a free connection;
none fails with MaxConnectionsError, which would leave a claimed job to its lease's expiry."""

from __future__ import annotations

import threading
import time

from apps import redis_clients as state


def test_more_callers_than_connections_wait_for_one_instead_of_failing() -> None:
    client = state.state_redis()
    callers = state.STATE_REDIS_MAX_CONNECTIONS + 50
    errors: list[BaseException] = []
    answers: list[object] = []
    start = threading.Barrier(callers)

    def hold_a_connection() -> None:
        start.wait()
        try:
            # Each call holds its connection for 0.5 s: together more than the pool has.
            answers.append(client.blpop(["sj:test:never-pushed"], timeout=0.5))
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            errors.append(e)

    threads = [threading.Thread(target=hold_a_connection) for _ in range(callers)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert answers == [None] * callers
    # time is the subject: the last 50 waited for the first 100 (about 0.5 s), well within the
    # 10 s wait for a free connection allowed, past which they would have failed.
    assert time.monotonic() - began < state.CONNECTION_WAIT_S
    assert client.connection_pool.max_connections == state.STATE_REDIS_MAX_CONNECTIONS
