"""``manage.py migrate_locked`` (deploy/kubernetes/: every pod of a release runs it first): one
process migrates at a time; the others wait for the lock, then find nothing to apply."""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections

from apps.operators.management.commands.migrate_locked import LOCK_NAME

pytestmark = pytest.mark.django_db(transaction=True)

# Holders of this command's lock: pg_locks is the whole server's, and make test's other processes
# take advisory locks of their own (the publisher's, the test-database template's) meanwhile.
_HELD = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(%s, 0)"
)


def _hold_lock(release: threading.Event, taken: threading.Event) -> None:
    conn = connections.create_connection("default")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [LOCK_NAME])
            taken.set()
            release.wait(30)
            cur.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [LOCK_NAME])
    finally:
        conn.close()


def test_it_waits_while_another_process_migrates_then_applies_nothing_twice(capsys):
    release, taken = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_lock, args=(release, taken))
    holder.start()
    assert taken.wait(10)
    with connection.cursor() as cur:  # the count below sees a holder
        cur.execute(_HELD, [LOCK_NAME])
        assert cur.fetchone()[0] == 1
    # time is the subject: the holder keeps the lock 1.5 s, long enough for migrate_locked to ask
    threading.Timer(1.5, release.set).start()
    call_command("migrate_locked", "--noinput")
    returned_after_the_release = release.is_set()
    holder.join()
    assert returned_after_the_release  # it waited for the holder
    out = capsys.readouterr().out
    assert "another process is migrating; waiting for it" in out
    assert "No migrations to apply." in out
    with connection.cursor() as cur:  # and gave the lock back
        cur.execute(_HELD, [LOCK_NAME])
        assert cur.fetchone()[0] == 0


def test_it_gives_up_when_the_lock_stays_taken():
    release, taken = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_lock, args=(release, taken))
    holder.start()
    try:
        assert taken.wait(10)
        with pytest.raises(CommandError, match="held the migration lock"):
            call_command("migrate_locked", "--noinput", "--lock-timeout-s", "1")
    finally:
        release.set()
        holder.join()
