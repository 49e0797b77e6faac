"""What a failed database call says about the database: down, busy, or nothing (the error may be
the caller's own). Used by the writer, which must not count the database's condition against a
receipt, and by the worker, which must send a message again rather than drop
it when it could not ask the database whether to run it, and by the politeness gate.

A neutral module (tests/test_architecture.py): it imports no app, so every app may use it."""

from __future__ import annotations

import psycopg
from django.db import utils as db_utils

# What a failed transaction says about the database, by SQLSTATE
# (https://www.postgresql.org/docs/current/errcodes-appendix.html):
# DOWN, the database cannot work for anyone now: 08 connection exception; 53 insufficient
# resources (disk full, out of memory, too many connections); 58 system error (I/O error); 57P01
# admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now, 57P04 database dropped, 57P05
# idle session timeout.
# BUSY, the database works but this transaction lost to others or to time: 57014 query canceled
# (our statement timeout), 40 transaction rollback (40001 serialization failure, 40P01 deadlock),
# 55P03 lock not available.
DOWN = "down"
BUSY = "busy"
_DOWN_CLASSES = ("08", "53", "58", "57P")
_BUSY_CLASSES = ("57014", "40", "55P03")


def database_failure(exc: BaseException) -> str | None:
    """``DOWN`` or ``BUSY`` when this error is the database's condition rather than the
    receipt's, None when it may be the receipt's.

    Django wraps psycopg's errors in ``django.db.utils.*`` with the original as ``__cause__``, so
    the whole chain is looked at. ``DOWN``: an ``InterfaceError`` (the connection is closed or
    broken), an ``OperationalError`` raised by the client without a SQLSTATE (connection refused
    or lost, the pool's ``psycopg_pool.PoolTimeout``), or one of the SQLSTATEs above. ``BUSY``: the
    SQLSTATEs above. Anything else (``DataError``, ``IntegrityError``, ``ProgrammingError``,
    ``InternalError``, a bug in the fold) may be the receipt's."""
    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, psycopg.InterfaceError | db_utils.InterfaceError):
            return DOWN
        if isinstance(err, psycopg.OperationalError):
            state = err.sqlstate
            if state is None or state.startswith(_DOWN_CLASSES):
                return DOWN
            return BUSY if state.startswith(_BUSY_CLASSES) else None
        if isinstance(err, psycopg.Error):
            return None
        err = err.__cause__ or err.__context__
    return None
