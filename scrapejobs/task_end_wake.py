"""A scrape worker holds no message it has no free thread for (NFR-8; the why, with the benchmark
figure that holds it: docs/design/dispatch.md).

Celery's ``worker_disable_prefetch`` makes the consumer take a message only while the pool has a
free thread. Alone it stalls: kombu's Redis transport asks for the next message (its BRPOP) only on
a tick of the worker's event loop, and a task that ends on a pool thread does not wake that loop,
which then sleeps up to a second (kombu's BRPOP timeout). So each task's end also writes a byte to
a pipe the loop reads (``TaskEndWakesLoop``): the loop wakes, sees the free thread and asks for a
message at once (tests/e2e/test_no_reserve.py).

Both apply to the processes that consume only scrape messages (the worker and browser components,
scrapejobs/celery.py); the control component keeps its prefetch.
"""

from __future__ import annotations

import fcntl
import logging
import os
from typing import Any

from celery import bootsteps

logger = logging.getLogger(__name__)


class TaskEndWakesLoop(bootsteps.StartStopStep):
    """Wakes the worker's event loop each time a task of its thread pool ends (see the module's
    docstring). A subclass says where it applies (``include_if``)."""

    requires = ("celery.worker.components:Hub", "celery.worker.components:Pool")

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._fds: tuple[int, int] | None = None

    def start(self, parent: Any) -> None:
        hub: Any = getattr(parent, "hub", None)
        pool: Any = getattr(parent, "pool", None)
        if hub is None or pool is None or not hasattr(pool, "executor"):
            return  # no event loop, or not a thread pool: nothing to wake
        read_fd, write_fd = os.pipe()
        for fd in (read_fd, write_fd):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self._fds = (read_fd, write_fd)

        def drained(*_: Any) -> None:
            try:
                while os.read(read_fd, 4096):
                    pass
            except BlockingIOError:
                pass  # empty: the loop is awake, which was the point

        def wake(_: Any) -> None:
            try:
                os.write(write_fd, b"\0")
            except (BlockingIOError, OSError):
                pass  # a full pipe wakes the loop already; a closed one: the worker is stopping

        hub.add_reader(read_fd, drained)
        apply = pool.on_apply

        def on_apply(*args: Any, **kwargs: Any) -> Any:
            result = apply(*args, **kwargs)
            # After the task's own callbacks: by then the worker counts its thread as free.
            result.f.add_done_callback(wake)
            return result

        pool.on_apply = on_apply
        logger.debug("each task's end wakes the event loop")

    def stop(self, parent: Any) -> None:
        if self._fds is not None:
            hub = getattr(parent, "hub", None)
            if hub is not None:
                hub.remove(self._fds[0])
            for fd in self._fds:
                os.close(fd)
            self._fds = None
