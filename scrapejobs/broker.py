"""The broker transport: kombu's Redis transport, with one repair and one saving.

When the broker connection breaks, Celery collects the broken connection, which closes its transport
and forgets the broker's address (``Transport.client`` becomes None), and then closes it again.
Anything that still touches a channel of that connection afterwards, the second close giving back
the unacknowledged messages of a task in flight, or that task's acknowledgement when it ends,
builds a new Redis pool from the address and fails with ``AttributeError`` (kombu 5.7,
``Channel._connparams``). Celery only expects the transport's connection errors there, so it
called the ``AttributeError`` unrecoverable and the process exited: a Redis restart while the
writer held a task (every task but the scrape one is acknowledged late) killed the writer, and with
it the outbox publisher, until something restarted it (tests/intake/test_redis_down.py).

Here that case raises what it is, a connection error, which Celery already handles: the close is
ignored and the consumer reconnects; the acknowledgement is logged as failed and the message stays
in the broker's unacked set, given back after the visibility timeout (every task is idempotent:
the claims and leases in PostgreSQL decide, never the broker).

The saving: kombu builds a new redis-py client object for every call that does not bring one
(``Channel.conn_or_acquire``): each message a worker receives (its unacknowledged copy is
recorded) and each acknowledgement, and each message published. A client over a connection pool
holds no connection of its own and is safe to share between threads (every command takes a
connection from the pool and gives it back), so the channel keeps one per pool. Building them was
about 5 % of the scrape worker's interpreter time at a 1 ms target (docs/benchmarks.md, NFR-11).
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

NAME = "scrapejobs.broker:Transport"


class Channel(kombu_redis.Channel):
    _shared_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        """The channel's client of its (synchronous) pool, built once per pool; the event loop's
        client (``asynchronous``) is kombu's, built as kombu builds it."""
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[misc]
        pool = self.pool  # a new pool after kombu dropped the old one (_disconnect_pools)
        client = self._shared_client
        if client is None or client.connection_pool is not pool:
            client = self._shared_client = super()._create_client(asynchronous=False)  # type: ignore[misc]
        return client

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection was closed after it broke")
        return super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]


class Transport(kombu_redis.Transport):
    Channel = Channel


def transport_install() -> None:
    """Make redis:// and rediss:// broker URLs use ``Transport`` (kombu's alias table, its place
    for transports of one's own; the URL's scheme still says whether to use TLS)."""
    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = NAME
