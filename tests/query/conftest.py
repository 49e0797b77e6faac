"""Fixtures of the read path's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from apps import redis_clients


@pytest.fixture
def patient_fail_open_redis(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The fail-open Redis clients (apps/redis_clients.py: 100 ms, no retry) given 5 s instead, for
    tests whose subject is what the cache holds, not a slow Redis: on a machine loaded well past its
    cores a 100 ms answer is missed now and then, the read cache pauses itself for a second (as it
    should, NFR-1) and the database answers, which such a test would count as the cache failing.
    Slow and absent Redis have their own tests (test_slow_redis.py, the proxy cut in test_cache.py)."""
    monkeypatch.setattr(redis_clients, "FAIL_OPEN_TIMEOUT_S", 5.0)
    redis_clients._fail_open_client.cache_clear()
    redis_clients._async_clients.clear()
    yield
    redis_clients._fail_open_client.cache_clear()
    redis_clients._async_clients.clear()
