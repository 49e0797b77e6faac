"""Holding apps.results.locks' advisory lock from another database session, as another process
running the same pass would."""

from __future__ import annotations

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
