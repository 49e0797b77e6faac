"""Locks held from another database session, as another process would hold them: apps.results.locks'
advisory lock, and a job row's lock (a long transaction elsewhere)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.db import connection


@contextmanager
def lock_held_elsewhere(name: str) -> Iterator[None]:
    s = connection.settings_dict
    with psycopg.connect(
        host=s["HOST"] or "127.0.0.1",
        port=s["PORT"] or 5432,
        user=s["USER"],
        dbname=s["NAME"],
        autocommit=True,
    ) as other:
        other.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [name])
        try:
            yield
        finally:
            # Released before the session ends: a closed session's locks go when the server
            # notices, which may be after the test's next statement.
            other.execute("SELECT pg_advisory_unlock_all()")


def job_row_locked_elsewhere(
    job_id: str, locked: threading.Event, release: threading.Event, *, hold_s: float = 10
) -> None:
    """Run in a thread: lock the job's row (FOR UPDATE) in a session of its own, set ``locked``,
    and hold the lock until ``release`` is set (at most ``hold_s``)."""
    s = connection.settings_dict
    with psycopg.connect(
        host=s["HOST"] or None, port=s["PORT"] or None, user=s["USER"], dbname=s["NAME"]
    ) as conn:
        conn.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE", [job_id])
        locked.set()
        release.wait(hold_s)
        conn.rollback()
