"""?wait= without a connection per waiter (FR-15).

Each web process (an event loop under the ASGI server) has one ``FinalHub``: ONE PostgreSQL
connection LISTENs on ``JOB_FINAL_CHANNEL`` (payload: the job id) and wakes the requests of this
process that wait for that job. A waiting request is an asyncio task parked on an event: it holds
no database connection and no thread. Before a waiter reads its job it registers (``watch``), so
a change after its read is sure to wake it; the hub re-checks every waited job in one query every
SCRAPEJOBS_WAIT_RECHECK_S, so a lost notification (or one sent while the listener was
reconnecting) costs at most one interval. Every notice also drops the job's read-cache key first
(apps/query/cache.py, batched and awaited through redis.asyncio), so the woken request reads the
new row.

The same connection LISTENs on ``TOKEN_REVOKED_CHANNEL`` (FR-36): a revoked token leaves this
process's token cache as the notice arrives (a dict operation on the loop), and the whole cache is
emptied whenever the LISTEN is (re)established. The intake pays nothing per request for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Iterator
from typing import Any

import psycopg
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, connections
from psycopg import sql

from apps.jobs.final_notices import JOB_FINAL_CHANNEL, jobs_final_among
from apps.query.cache import job_cache_forget_async
from apps.tenants.services import (
    TOKEN_REVOKED_CHANNEL,
    token_cache_clear,
    token_revocation_heard,
    token_revocations_listening,
)

logger = logging.getLogger(__name__)

# How long the listener waits before connecting again after losing its connection.
RECONNECT_S = 1.0
# libpq parameters taken from Django's OPTIONS (its own options, pool and such, are not libpq's).
_LIBPQ_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "application_name", "options")


def listen_conninfo() -> dict[str, Any]:
    """Connection parameters of the default database, for a connection of the listener's own:
    notifications arrive only between transactions, on a connection nobody else uses."""
    s = connections["default"].settings_dict
    options = s.get("OPTIONS") or {}
    params: dict[str, Any] = {
        "dbname": s["NAME"],
        "user": s.get("USER") or None,
        "password": s.get("PASSWORD") or None,
        "host": s.get("HOST") or options.get("host") or None,
        "port": str(s["PORT"]) if s.get("PORT") else None,
        "connect_timeout": 5,
        **{k: v for k, v in options.items() if k in _LIBPQ_OPTIONS},
    }
    return {k: v for k, v in params.items() if v is not None}


class FinalHub:
    """One listener and one re-check timer for every waiter of an event loop."""

    def __init__(self) -> None:
        self.recheck_s: float = settings.SCRAPEJOBS_WAIT_RECHECK_S
        self.listening = asyncio.Event()  # set while the listener's LISTEN is in force
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._to_wake: set[str] = set()
        self._waking: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def watch(self, job_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever ``job_id`` may have changed; register BEFORE reading the job."""
        self._start()
        event = asyncio.Event()
        self._waiters.setdefault(job_id, set()).add(event)
        try:
            yield event
        finally:
            events = self._waiters.get(job_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiters[job_id]

    def start(self) -> None:
        """Listen from now on. The web process calls it as its event loop starts
        (scrapejobs/web_worker.py): the listener also drops the read cache's copies of jobs that
        became final (``_wake``), which must not wait for a first ``?wait=``."""
        self._start()

    def _start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._listen()), asyncio.create_task(self._recheck())]

    def _wake(self, job_ids: list[str]) -> None:
        """Drop the cached rows first, then wake: the woken requests must read the new row. The
        DELs are awaited in one task (NFR-21: a slow Redis never stalls the loop), one DEL for
        every notice that arrived while the previous one was on its way."""
        self._to_wake.update(job_ids)
        if self._waking is None or self._waking.done():
            self._waking = asyncio.create_task(self._forget_then_wake())

    async def _forget_then_wake(self) -> None:
        while self._to_wake:
            job_ids, self._to_wake = sorted(self._to_wake), set()
            await job_cache_forget_async(job_ids)
            for job_id in job_ids:
                for event in self._waiters.get(job_id, ()):
                    event.set()

    def _wake_all(self) -> None:
        self._wake(list(self._waiters))

    async def _listen(self) -> None:
        while True:
            try:
                await self._listen_once()
            except (psycopg.Error, OSError):
                logger.warning("?wait= listener lost its connection; reconnecting", exc_info=True)
            self.listening.clear()
            token_revocations_listening(False)
            await asyncio.sleep(RECONNECT_S)

    async def _listen_once(self) -> None:
        async with await psycopg.AsyncConnection.connect(autocommit=True, **listen_conninfo()) as conn:
            # One statement for both channels (no parameters: the simple query protocol takes two).
            await conn.execute(
                sql.SQL("LISTEN {}; LISTEN {}").format(
                    sql.Identifier(JOB_FINAL_CHANNEL), sql.Identifier(TOKEN_REVOKED_CHANNEL)
                )
            )
            # Notices sent before this LISTEN are lost: whoever waits reads again now, and the
            # token cache forgets every token (a revocation may have been missed).
            token_cache_clear()
            token_revocations_listening(True)
            self.listening.set()
            self._wake_all()
            async for note in conn.notifies():
                if note.channel == TOKEN_REVOKED_CHANNEL:
                    token_revocation_heard(note.payload)
                else:
                    self._wake([note.payload])

    async def _recheck(self) -> None:
        while True:
            await asyncio.sleep(self.recheck_s)
            waited = list(self._waiters)
            if not waited:
                continue
            try:
                final = await sync_to_async(_final_among, thread_sensitive=False)(waited)
            except Exception:  # noqa: BLE001 - the database away: the next tick tries again
                logger.warning("?wait= re-check failed", exc_info=True)
                continue
            self._wake(sorted(final))


def _final_among(job_ids: list[str]) -> set[str]:
    try:
        return jobs_final_among(job_ids)
    finally:
        connection.close()  # back to the pool: a thread of the executor must not keep it


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FinalHub] = weakref.WeakKeyDictionary()


def final_hub() -> FinalHub:
    """The hub of the running event loop (one per web process under the ASGI server)."""
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = FinalHub()
    return hub
