"""The read cache of GET /jobs/{id}: cache-aside in Redis, one key per job.

Status polling is the read side's hot path, and every poll used to be a PostgreSQL read on the
database intake writes to. Now:

- a job not final yet is kept SCRAPEJOBS_READ_CACHE_TTL_S (2 s): a change shows within that even
  if its notice is lost; a final job is kept SCRAPEJOBS_READ_CACHE_FINAL_TTL_S, since its row no
  longer changes (a requeue sends the final notice too, which drops it);
- the completion notice drops the key (``job_cache_forget``, called by each web process's
  listener in apps/query/waiting.py, started with the process), so a job that ends is seen ended
  at once;
- a store is version-checked (a Lua compare-and-set): the entry carries the row's ``version``
  (bumped by every write of the row), and a row older than the entry held, or than the mark a
  committed requeue, retention or prune left (``apps.redis_clients.job_read_cache_forget``), is
  refused. So a reader that read a final row just before a requeue committed cannot store it back
  for a day, nor one that read it before its result expired or it was pruned. (A reader racing a
  plain completion notice may store the running row it read: it lives SCRAPEJOBS_READ_CACHE_TTL_S.)
- one key per job, holding the row and its tenant: a read for another tenant is a miss that goes
  to the database, which scopes it by tenant as before, so no tenant reads another's job here;
- a stampede on one key reaches the database at most once per TTL per process: misses for the
  same job queue on one lock, and whoever comes after the first finds the key filled;
- Redis slow or down: reads go to the database (after a failure Redis is left alone for a
  second, so an outage costs each request nothing), never a 500.

Only the row's columns are kept (``JOB_COLUMNS``: those of the job's public view, declared in
apps/api/job_view.py), never a representation: links are built per request, so a signed result
link is never served past its validity. An entry missing one of the columns (kept before a field
joined the view) is a miss. Lists are not cached.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
import weakref
from datetime import datetime
from typing import Any, cast

import redis
from django.conf import settings
from django.db.models import Field

from apps.api.ids import parse_job_id
from apps.jobs.models import Job, JobStatus
from apps.query.selectors import JOB_COLUMNS, job_get
from apps.redis_clients import (
    READ_CACHE_SEP,
    WarnEvery,
    fail_open_redis,
    fail_open_redis_async,
    job_read_cache_key,
)

logger = logging.getLogger(__name__)
_warn = WarnEvery(logger)

# After a Redis failure, reads skip Redis this long: a timeout per request would add 100 ms each.
REDIS_PAUSE_S = 1.0

_redis_paused_until = 0.0
_locks: weakref.WeakValueDictionary[str, threading.Lock] = weakref.WeakValueDictionary()
_locks_guard = threading.Lock()


def job_read(*, tenant_id: uuid.UUID, job_id: uuid.UUID | str) -> Job | None:
    """The tenant's job (the columns of its API representation), or None: from Redis when it
    holds the job, else from the database, then kept in Redis."""
    parsed = parse_job_id(job_id)
    if parsed is None:
        return None
    if settings.SCRAPEJOBS_READ_CACHE_TTL_S == 0:
        return job_get(tenant_id=tenant_id, job_id=parsed)
    key = job_read_cache_key(parsed)
    found = _cached(key, tenant_id)
    if found is not None:
        return found
    with _key_lock(key):
        # Whoever held the lock before us may have filled the key: one database read per TTL.
        found = _cached(key, tenant_id)
        if found is not None:
            return found
        job = job_get(tenant_id=tenant_id, job_id=parsed)
        if job is not None:
            _store(key, tenant_id, job)
        return job


def job_cached(*, tenant_id: uuid.UUID, job_id: uuid.UUID) -> Job | None:
    """The tenant's job when Redis holds it, else None (not held, another tenant's, the cache
    switched off, Redis away): never the database."""
    if settings.SCRAPEJOBS_READ_CACHE_TTL_S == 0:
        return None
    return _cached(job_read_cache_key(job_id), tenant_id)


async def job_cached_async(*, tenant_id: uuid.UUID, job_id: uuid.UUID) -> Job | None:
    """``job_cached`` for the event loop (apps/query/fast_read.py): the round trip is awaited."""
    if settings.SCRAPEJOBS_READ_CACHE_TTL_S == 0:
        return None
    key = job_read_cache_key(job_id)
    return _entry_job(await _redis_call_async(lambda r: r.get(key)), tenant_id)


def job_cache_forget(job_ids: list[str]) -> None:
    """Drop these jobs' copies (they became final, or left a final state); a mark a committed
    write left stays (it refuses older copies)."""
    if job_ids:
        keys = [job_read_cache_key(i) for i in job_ids]
        _redis_call(lambda r: r.eval(_DROP_COPIES, len(keys), *keys))


# KEYS: entry keys. Deletes the copies, keeps the marks ("<version>|").
_DROP_COPIES = """
for _, key in ipairs(KEYS) do
  local cur = redis.call('GET', key)
  if cur and string.sub(cur, -1) ~= '|' then redis.call('DEL', key) end
end
return #KEYS
"""

# KEYS[1]: the entry; ARGV: version, row JSON, TTL. Stored unless what is there (a copy or a
# mark) has a newer version: 1 stored, 0 refused.
_STORE_IF_NOT_OLDER = """
local cur = redis.call('GET', KEYS[1])
if cur then
  local held = tonumber(string.match(cur, '^(%d+)|'))
  if held and held > tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'EX', ARGV[3])
return 1
"""


# Keys dropped by one DEL: a burst of notices costs a few round trips, none of them huge.
FORGET_BATCH = 1000


async def job_cache_forget_async(job_ids: list[str]) -> None:
    """``job_cache_forget`` for the event loop (apps/query/waiting.py), FORGET_BATCH keys a DEL."""
    for i in range(0, len(job_ids), FORGET_BATCH):
        keys = [job_read_cache_key(j) for j in job_ids[i : i + FORGET_BATCH]]
        await _redis_call_async(lambda r, keys=keys: r.delete(*keys))


def _key_lock(key: str) -> threading.Lock:
    with _locks_guard:
        lock = _locks.get(key)
        if lock is None:
            lock = _locks[key] = threading.Lock()
        return lock


def _cached(key: str, tenant_id: uuid.UUID) -> Job | None:
    return _entry_job(_redis_call(lambda r: r.get(key)), tenant_id)


def _entry_job(raw: str | None, tenant_id: uuid.UUID) -> Job | None:
    if not raw:
        return None
    _version, sep, text = raw.partition(READ_CACHE_SEP)
    if not sep or not text:
        return None  # a mark (the job changed, no copy yet) or an entry of another format
    entry = json.loads(text)
    if entry["tenant"] != str(tenant_id):
        return None  # another tenant's job: the database answers (not found)
    row = entry["row"]
    if not all(name in row for name in JOB_COLUMNS):
        # Kept before a field joined the view (docs/development.md): a miss, which the database
        # answers and stores anew. Served, the missing column would be read from the database,
        # a query the fast read may not make on the event loop.
        return None
    # from_db takes the values in the model's field order; the other columns stay deferred.
    names = [f.attname for f in Job._meta.concrete_fields if f.attname in row]
    return Job.from_db("default", names, [_field(name).to_python(row[name]) for name in names])


def _field(name: str) -> Field[Any, Any]:
    return cast("Field[Any, Any]", Job._meta.get_field(name))


def _store(key: str, tenant_id: uuid.UUID, job: Job) -> None:
    if job.status == JobStatus.ERASED:
        return  # a tombstone is 410 (FR-52): the fast path must never answer it from a copy
    row = {name: getattr(job, name) for name in JOB_COLUMNS}
    raw = json.dumps({"tenant": str(tenant_id), "row": row}, default=_json_value)
    ttl = settings.SCRAPEJOBS_READ_CACHE_FINAL_TTL_S if job.is_final else settings.SCRAPEJOBS_READ_CACHE_TTL_S
    # One round trip, as the SET it replaces (EVAL: a Script's EVALSHA would add SCRIPT LOAD).
    _redis_call(lambda r: r.eval(_STORE_IF_NOT_OLDER, 1, key, int(job.version), raw, ttl))


def _json_value(value: object) -> str:
    """Datetimes to the microsecond (DjangoJSONEncoder keeps milliseconds), ids as text."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} in a cached job row")


async def _redis_call_async(call: Any) -> Any:
    """``await call(client)`` on the loop's client, or None as ``_redis_call``."""
    global _redis_paused_until  # noqa: PLW0603 - one flag per process, shared by its requests
    if time.monotonic() < _redis_paused_until:
        return None
    try:
        return await call(fail_open_redis_async())
    except redis.RedisError:
        _redis_paused_until = time.monotonic() + REDIS_PAUSE_S
        _warn("read cache: Redis did not answer; reading jobs from the database")
        return None


def _redis_call(call: Any) -> Any:
    """``call(client)``, or None when Redis fails (and then Redis is skipped for a moment)."""
    global _redis_paused_until  # noqa: PLW0603 - one flag per process, shared by its requests
    if time.monotonic() < _redis_paused_until:
        return None
    try:
        return call(fail_open_redis())
    except redis.RedisError:
        _redis_paused_until = time.monotonic() + REDIS_PAUSE_S
        _warn("read cache: Redis did not answer; reading jobs from the database")
        return None
