"""A scrape worker's first jobs start as fast as its later ones (NFR-8, NFR-11).

A worker that has just started has no connection to PostgreSQL or Redis, and its PostgreSQL
session has not planned the claim nor read the tables' catalogs; the Redis server may not hold the
gate's script yet. Left to the first jobs, every thread of the pool pays for that at once, the
pool's connections opened side by side while each of them waits, at the gate and at the claim
(docs/design/dispatch.md). ``worker_warm_up`` does it once as the worker becomes ready, before it
takes its first message: the claim statement prepared on a pooled connection (its plan and the
catalogs of the tables it reads), the gate's script loaded into Redis, and the state Redis
connections the pool's threads will use opened. Each step is best effort: a dependency that is
away as the worker starts is logged and met again by the first job, as without the warm-up. The
worker waits for it at most ``WARM_UP_WAIT_S`` (``worker_warm_up_bounded``): a database that is
away can hold a connection's wait for the pool's timeout (30 s), and a worker that cannot claim
yet must still start, take its messages and have them delivered again (apps/scraping/tasks.py).
"""

from __future__ import annotations

import logging
import threading

import redis

from apps.jobs.claims import claim_statement_prepare
from apps.politeness.limiter import gate_scripts_load
from apps.redis_clients import STATE_REDIS_MAX_CONNECTIONS, state_redis
from apps.scraping.fetch_and_store import connection_release

logger = logging.getLogger(__name__)

# How long a starting worker waits for its warm-up before it takes messages anyway.
WARM_UP_WAIT_S = 5.0


def worker_warm_up_bounded(*, threads: int, wait_s: float = WARM_UP_WAIT_S) -> dict[str, int] | None:
    """``worker_warm_up`` on a thread of its own, waited for at most ``wait_s``: what it did, or
    None when it was still running then (it goes on, and ends whenever its dependencies answer)."""
    done: list[dict[str, int]] = []
    thread = threading.Thread(
        target=lambda: done.append(worker_warm_up(threads=threads)), name="warm-up", daemon=True
    )
    thread.start()
    thread.join(wait_s)
    if not done:
        logger.warning("warm-up still running after %.0f s; the worker starts without it", wait_s)
        return None
    return done[0]


def worker_warm_up(*, threads: int) -> dict[str, int]:
    """Warm this process's connections up for a pool of ``threads`` threads; returns what was
    done (``statements`` prepared, ``scripts`` loaded, Redis ``connections`` opened)."""
    done = {"statements": 0, "scripts": 0, "connections": 0}
    try:
        claim_statement_prepare()
        done["statements"] = 1
    except Exception:  # noqa: BLE001 - best effort: the first claim opens its own
        logger.warning("warm-up: the claim statement could not be prepared", exc_info=True)
    finally:
        connection_release()  # back to the pool, warm
    client = state_redis()
    try:
        done["scripts"] = gate_scripts_load()
        done["connections"] = _redis_connections_open(client, min(threads, STATE_REDIS_MAX_CONNECTIONS))
    except redis.RedisError:
        logger.warning("warm-up: Redis could not be reached", exc_info=True)
    return done


def _redis_connections_open(client: redis.Redis, n: int) -> int:
    """Have ``client``'s pool hold ``n`` open connections (those it holds already count): each
    taken, connected if it was not, and given back open; returns ``n``."""
    pool = client.connection_pool
    taken = []
    try:
        for _ in range(n):
            taken.append(pool.get_connection())  # connects, or hands back an open one
    finally:
        for conn in taken:
            pool.release(conn)
    return len(taken)
