"""One holder at a time for long housekeeping passes over the result storage (retention, an
export window), across processes and machines: a PostgreSQL session-level advisory lock.

A session lock, not a transaction one: the pass holds no transaction while it talks to the
storage. A holder that dies loses its session and with it the lock, so a crash never leaves a
pass locked out."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def session_lock(name: str) -> Iterator[bool]:
    """Try to take the lock named ``name`` without waiting; yields whether it was taken, and
    releases it on the way out if so."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [name])
        taken = bool(cur.fetchone()[0])
    try:
        yield taken
    finally:
        if taken:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [name])
