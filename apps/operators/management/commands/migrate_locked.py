"""``python manage.py migrate_locked``: ``migrate``, one process at a time across machines.

Every pod of a new release runs it before its component starts (deploy/kubernetes/, an
initContainer; docker/compose.yaml's one-shot ``migrate``), so several may start at once: the
first takes a PostgreSQL session-level advisory lock and migrates, the others wait for it and then
find nothing left to apply. The lock is tried, not waited for in one statement: a session waiting
inside ``pg_advisory_lock`` holds a snapshot that a ``CREATE INDEX CONCURRENTLY`` of the holder
would wait for in turn. A holder that dies loses its session and the lock with it.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

LOCK_NAME = "scrapejobs-migrate"


class Command(BaseCommand):
    help = "Apply migrations under a database-wide lock (one migrating process at a time)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--noinput", "--no-input", action="store_false", dest="interactive")
        parser.add_argument(
            "--lock-timeout-s", type=float, default=900.0, help="give up waiting for the lock after this long"
        )

    def handle(self, *args: Any, interactive: bool, lock_timeout_s: float, **options: Any) -> None:
        deadline = time.monotonic() + lock_timeout_s
        waited = False
        while not self._try_lock():
            if time.monotonic() > deadline:
                raise CommandError(f"another process held the migration lock for {lock_timeout_s:.0f} s")
            if not waited:
                self.stdout.write("another process is migrating; waiting for it")
                waited = True
            time.sleep(1.0)
        try:
            call_command("migrate", interactive=interactive, verbosity=options["verbosity"])
        finally:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [LOCK_NAME])

    @staticmethod
    def _try_lock() -> bool:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [LOCK_NAME])
            return bool(cur.fetchone()[0])
