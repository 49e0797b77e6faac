"""Stopping an outbound request from another thread, and what its connections know about it.

A request can sit for minutes inside one read (waiting for headers, or for the next byte), where
no check between reads can stop it. ``FetchInterrupt.fire()``, from another thread, shuts the
socket of the request's current connection down, so that read ends at once; the caller then
decides what the stop means (the fetcher asks its ``check`` for the reason; webhook delivery
fires it at its deadline).

``request_context`` tells the guarded connections (``apps.outbound.connections``), on the
request's thread, which interrupt watches them and the request's overall deadline: urllib3 gives
no way to pass either through ``urlopen``, and a pooled connection serves many requests.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from urllib3.connection import HTTPConnection


class Interrupted(Exception):
    """Raised inside the request when its interrupt had fired before a connection was watched.
    Not an OSError, so urllib3 passes it through untouched (discarding the connection)."""


class FetchInterrupt:
    """A handle another thread uses to stop one request, even one blocked in a read.

    The request tells it which connection it is using (``watch``) and forgets it before the
    connection goes back to the pool (``forget``); ``fire()`` shuts down the sockets watched at
    that moment. Watching and firing hold one lock, so a socket is never shut down once the
    request has let go of it (it may already carry another request), and a request that starts
    using a connection after ``fire()`` stops at once instead of being missed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fired = False
        self._conn: HTTPConnection | None = None
        self._connecting: socket.socket | None = None

    @property
    def fired(self) -> bool:
        return self._fired

    def fire(self) -> None:
        with self._lock:
            self._fired = True
            # While connecting, the socket is not yet the connection's ``sock``.
            for sock in (self._connecting, getattr(self._conn, "sock", None)):
                if sock is not None:
                    _shutdown(sock)

    def watch(self, *, conn: HTTPConnection, connecting: socket.socket | None = None) -> None:
        with self._lock:
            if self._fired:
                raise Interrupted("the fetch was stopped from outside")
            self._conn = conn
            if connecting is not None:
                self._connecting = connecting

    def forget(self) -> None:
        with self._lock:
            self._conn = self._connecting = None


def _shutdown(sock: socket.socket) -> None:
    # A blocked recv() returns at once (end of stream); a blocked connect() fails. Errors mean the
    # socket is already closed, or was handed over to TLS (the wrapper is the connection's sock).
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


@dataclass
class RequestContext:
    interrupt: FetchInterrupt | None
    # time.monotonic() by which the whole request (every hop, the body) must be over.
    deadline: float


# What the connection classes need to know about the request on whose thread they run.
_context = threading.local()


def current_context() -> RequestContext | None:
    return getattr(_context, "request", None)


@contextmanager
def request_context(*, interrupt: FetchInterrupt | None, deadline: float) -> Iterator[RequestContext]:
    """Make ``interrupt`` and ``deadline`` those of the requests this thread sends inside."""
    ctx = RequestContext(interrupt=interrupt, deadline=deadline)
    previous = current_context()
    _context.request = ctx
    try:
        yield ctx
    finally:
        _context.request = previous
