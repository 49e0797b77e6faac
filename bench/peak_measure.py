"""What bench/peak.py reads from the machine and the running service (NFR-17): the limits before a
rung, once a second during it, and the wait for its last jobs."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from bench.common import Proc, _pg_connect, rss_mib, sql, target_stats
from bench.peak_plan import Host, mem_available_mib, threads_free

# Jobs queued this long after acceptance, due and not deferred, count as waiting for a slot.
WAITING_QUERY = (
    "SELECT count(*) FROM jobs_job WHERE status = 'queued' AND created_at < now() - interval '5 seconds' "
    "AND (not_before IS NULL OR not_before <= now())"
)


class Sampler:
    """Once a second, while the jobs run: the workers' RSS sum, the target's fetches in flight,
    the benchmark database's PostgreSQL connections (this sampler's own left out), Redis's
    clients, the memory left on the machine, and whether jobs were due and queued while worker
    slots were free (the dispatcher's share of a miss)."""

    def __init__(self, db: str, target: str, workers: list[Proc], slots: int):
        self.db, self.target, self.workers, self.slots = db, target, workers, slots
        self.rss: list[float] = []
        self.in_flight: list[int] = []
        self.connections: list[int] = []
        self.redis_clients: list[int] = []
        self.mem_available: list[float] = []
        self.waiting_while_free = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-sampler", daemon=True)

    def _run(self) -> None:
        import redis  # noqa: PLC0415

        r = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
        with _pg_connect(self.db) as conn:
            while not self._stop.wait(1.0):
                self.rss.append(sum(rss_mib(w.p.pid) for w in self.workers))
                in_flight = int(target_stats(self.target).get("in_flight", 0))
                self.in_flight.append(in_flight)
                query = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                self.connections.append(int(conn.execute(query).fetchone()[0]) - 1)  # type: ignore[index]
                self.redis_clients.append(int(r.info("clients")["connected_clients"]))
                self.mem_available.append(mem_available_mib())
                waiting = int(conn.execute(WAITING_QUERY).fetchone()[0])  # type: ignore[index]
                self.waiting_while_free += int(waiting > 0 and in_flight < 0.95 * self.slots)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def wait_for_final(db: str, accepted: int, *, quiet_s: float) -> int:
    """Wait until ``accepted`` jobs are final, or none became final for ``quiet_s``: the number
    that are."""
    query = "SELECT count(*) FROM jobs_job WHERE status IN ('succeeded', 'failed', 'cancelled')"
    last, last_change = -1, time.monotonic()
    while True:
        final = int(sql(db, query)[0][0])
        if final >= accepted:
            return final
        if final != last:
            last, last_change = final, time.monotonic()
        elif time.monotonic() - last_change > quiet_s:
            return final
        time.sleep(1.0)


def _one(conn: Any, query: str) -> int:
    return int(conn.execute(query).fetchone()[0])


def host_limits(fd_limit: int) -> Host:
    """What the machine allows now: free threads, descriptors, PostgreSQL connections (on
    DATABASE_URL's server, all its databases), Redis clients, memory."""
    import redis  # noqa: PLC0415

    with _pg_connect(os.environ["DATABASE_URL"]) as conn:
        most = _one(conn, "SHOW max_connections")
        reserved = _one(conn, "SHOW superuser_reserved_connections")
        used = _one(conn, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
    r = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    free, which = threads_free()
    return Host(
        threads_free=free,
        threads_limit=which,
        fd_limit=fd_limit,
        pg_connections_free=most - reserved - used + 1,  # this query's own connection goes
        pg_max_connections=most,
        redis_maxclients=int(r.config_get("maxclients").get("maxclients") or 10000),
        redis_clients=int(r.info("clients")["connected_clients"]),
        mem_available_mib=mem_available_mib(),
    )
