"""Process-wide Redis clients, and the Redis keys several apps share.

A neutral module (tests/test_architecture.py): it imports no app, so every app may use it,
apps.jobs included. A key owned by one app lives with that app (the receipt streams and the writer
lease in apps/writer/streams.py, the nudges in apps/jobs/nudges.py, the politeness buckets in
apps/politeness/keys.py); the ones here cross apps, none of which owns the other: the
read cache of GET /jobs/{id} (apps.query fills it, apps.jobs drops entries after a requeue,
retention or a prune), a job's cancel flag (apps.jobs sets it, apps.scraping obeys it) and a
running attempt's lease mark (apps.scraping writes it, the sweeper in apps.scheduling reads it).
The key strings are a wire format: a changed one strands what running processes and Redis hold.

Two logical databases on one server: ``REDIS_URL`` holds the service's own state (write receipts,
cancel flags, rate-limit buckets, the writer lease) and the Celery broker uses
``CELERY_BROKER_URL`` (by default the same server, next database). Losing every broker message
(FLUSHDB of the broker database) therefore loses no receipt.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import weakref

import redis
import redis.asyncio
from django.conf import settings
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

# A call that fails open (the per-token rate limit on the request path) gives Redis this long to
# connect and to answer; a healthy local Redis answers in well under a millisecond.
FAIL_OPEN_TIMEOUT_S = 0.1


# Connections of one process to the state Redis. redis-py's own pool raises MaxConnectionsError
# for the 101st caller at once; a worker with more slots than that (docs/benchmarks.md, capacity:
# 1,000 fetches in flight in one process) has more callers at a moment, each for well under a
# millisecond, so a caller waits for a free connection instead (at most CONNECTION_WAIT_S).
STATE_REDIS_MAX_CONNECTIONS = 100
CONNECTION_WAIT_S = 10


@functools.cache
def state_redis() -> redis.Redis:
    pool = redis.BlockingConnectionPool.from_url(
        settings.REDIS_URL,
        max_connections=STATE_REDIS_MAX_CONNECTIONS,
        timeout=CONNECTION_WAIT_S,
        decode_responses=True,
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=30,
        retry_on_timeout=True,
    )
    return redis.Redis(connection_pool=pool)


def fail_open_redis() -> redis.Redis:
    """The state Redis for calls that must not hold up a request when Redis is slow or down
    (NFR-1: accepting a job depends only on PostgreSQL): short timeouts, no retries; the caller
    catches ``redis.RedisError`` and goes on without Redis."""
    return _fail_open_client(settings.REDIS_URL)


@functools.cache
def _fail_open_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=FAIL_OPEN_TIMEOUT_S,
        socket_connect_timeout=FAIL_OPEN_TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
    )


_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, redis.asyncio.Redis] = (
    weakref.WeakKeyDictionary()
)


def fail_open_redis_async() -> redis.asyncio.Redis:
    """``fail_open_redis`` for code on the web process's event loop (apps/query/fast_read.py,
    apps/query/waiting.py): a slow Redis makes that request wait, never every connection of the
    process (NFR-21). One client per event loop: its connections belong to the loop."""
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        client = _async_clients[loop] = redis.asyncio.Redis.from_url(
            settings.REDIS_URL,
            decode_responses=True,
            socket_timeout=FAIL_OPEN_TIMEOUT_S,
            socket_connect_timeout=FAIL_OPEN_TIMEOUT_S,
            retry=AsyncRetry(NoBackoff(), 0),
        )
    return client


class WarnEvery:
    """A warning logged at most once per ``interval_s``, with how many were left out since: a Redis
    outage under load must not write one line per request."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0):
        self.logger, self.interval_s = logger, interval_s
        self._last = float("-inf")
        self._suppressed = 0
        self._lock = threading.Lock()

    def __call__(self, message: str, *args: object, exc_info: BaseException | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.interval_s:
                self._suppressed += 1
                return
            self._last, suppressed, self._suppressed = now, self._suppressed, 0
        if suppressed:
            message += f" ({suppressed} more like this not logged)"
        self.logger.warning(message, *args, exc_info=exc_info)


def job_read_cache_key(job_id: object) -> str:
    """A job's row in the read cache of GET /jobs/{id} (apps/query/cache.py). Named here, below
    both apps, so that the ledger can drop it when a final job leaves its final state (a requeue)."""
    return f"sj:job:{job_id}"


# A read-cache entry is "<version>|<row as JSON>"; "<version>|" alone is a mark: the job was
# written at that version and its copy dropped; the cache stores no row older than a mark or an
# entry it holds (apps/query/cache.py). A pruned job's mark is one no version ever reaches.
READ_CACHE_SEP = "|"
READ_CACHE_GONE_VERSION = 2**53  # exact in Lua's numbers (doubles)
# How long a mark is kept: longer than any read of the row and the store after it take.
READ_CACHE_MARK_TTL_S = 300

# KEYS: entry keys; ARGV[1]: the marks' TTL, ARGV[1 + i]: the version written for KEYS[i]. An
# entry already at that version or newer stays (it was read after the write).
_FORGET = """
for i, key in ipairs(KEYS) do
  local v = tonumber(ARGV[i + 1])
  local cur = redis.call('GET', key)
  local held = cur and tonumber(string.match(cur, '^(%d+)|')) or -1
  if held < v then redis.call('SET', key, ARGV[i + 1] .. '|', 'EX', ARGV[1]) end
end
return #KEYS
"""


def job_read_cache_forget(versions: dict[str, int]) -> None:
    """After the commit of a write that changed these jobs (job id → the version it wrote): their
    read-cache copies go, replaced by a mark of that version, so a reader that read the row before
    the write cannot store its older copy afterwards (a requeue, retention, a prune). Redis away:
    logged; a copy of a final job may then outlive the write until its TTL."""
    if not versions:
        return
    keys = [job_read_cache_key(i) for i in versions]
    try:
        fail_open_redis().eval(
            _FORGET, len(keys), *keys, READ_CACHE_MARK_TTL_S, *[str(int(v)) for v in versions.values()]
        )
    except redis.RedisError:
        logging.getLogger(__name__).warning("read cache: could not drop %d changed jobs", len(keys))


def cancel_flag_key(job_id: str, attempt: int) -> str:
    """The cancel flag of one attempt of a job (``job_cancel`` sets it; the worker running that
    attempt stops). Per attempt, so a requeued job's next attempt is not stopped by an old cancel."""
    return f"sj:cancel:{job_id}:{attempt}"


def lease_mark_key(job_id: str) -> str:
    """A running attempt's lease as its worker's lease keeper keeps it in Redis: the attempt
    number, expiring ``SCRAPEJOBS_LEASE_S`` after the keeper last wrote it
    (apps.scraping.leases). While PostgreSQL is away the keeper cannot renew the lease in the
    database; this mark says the worker is alive all the same."""
    return f"sj:lease:{job_id}"
