"""Which failures are the database's and which the receipt's (FR-W4).

A receipt counts a failure (and ends among the dead receipts after MAX_ATTEMPTS) only when the
failure may be its own; the database being down or busy counts nothing. The errors here are the
real ones psycopg raises (a refused connection is made for real) and Django's wrappers of them.
"""

from __future__ import annotations

import socket

import psycopg
import psycopg.errors as pe
import pytest
from django.db import utils as db_utils

from apps.db_failures import BUSY, DOWN, database_failure


def _wrapped(exc: Exception, wrapper: type[Exception] = db_utils.OperationalError) -> Exception:
    """As Django raises it: its own class, the driver's error as __cause__ (django/db/utils.py)."""
    try:
        raise wrapper(*exc.args) from exc
    except Exception as e:  # noqa: BLE001
        return e


def _refused() -> psycopg.OperationalError:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the socket is closed
    try:
        psycopg.connect(host="127.0.0.1", port=port, user="postgres", connect_timeout=2)
    except psycopg.OperationalError as exc:
        return exc
    raise AssertionError("connected to a closed port")


@pytest.mark.parametrize(
    "error",
    [
        pe.AdminShutdown("terminating connection due to administrator command"),  # pg_ctl stop -m fast
        pe.CrashShutdown("terminating connection because of crash of another server process"),
        pe.CannotConnectNow("the database system is starting up"),
        pe.ConnectionFailure("connection failure"),
        pe.TooManyConnections("sorry, too many clients already"),
        pe.DiskFull("could not extend file"),
        pe.IoError("could not read block"),
        psycopg.InterfaceError("the connection is closed"),
    ],
)
def test_an_unavailable_database_is_down(error: Exception) -> None:
    assert database_failure(error) == DOWN
    assert database_failure(_wrapped(error)) == DOWN


def test_a_refused_connection_and_the_pools_timeout_are_down() -> None:
    from psycopg_pool import PoolTimeout

    refused = _refused()
    assert refused.sqlstate is None
    assert database_failure(_wrapped(refused)) == DOWN
    assert database_failure(_wrapped(PoolTimeout("couldn't get a connection after 30.00 sec"))) == DOWN
    assert database_failure(db_utils.InterfaceError("connection already closed")) == DOWN


@pytest.mark.parametrize(
    "error",
    [
        pe.QueryCanceled("canceling statement due to statement timeout"),
        pe.SerializationFailure("could not serialize access"),
        pe.DeadlockDetected("deadlock detected"),
        pe.LockNotAvailable("could not obtain lock"),
    ],
)
def test_a_timeout_or_a_conflict_is_busy(error: Exception) -> None:
    assert database_failure(_wrapped(error)) == BUSY


@pytest.mark.parametrize(
    "error",
    [
        _wrapped(pe.UniqueViolation("duplicate key"), db_utils.IntegrityError),
        _wrapped(pe.InvalidTextRepresentation("invalid input syntax for type uuid"), db_utils.DataError),
        _wrapped(pe.UndefinedColumn("column does not exist"), db_utils.ProgrammingError),
        _wrapped(pe.InternalError_("unexpected"), db_utils.InternalError),
        pe.ObjectNotInPrerequisiteState("an operational error that is not the database's state"),
        KeyError("outcome"),
        ValueError("a bug in the fold"),
    ],
)
def test_anything_else_may_be_the_receipts(error: Exception) -> None:
    assert database_failure(error) is None
