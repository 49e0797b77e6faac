"""Threads whose failures reach the test.

An ``assert`` (or any exception) inside a plain ``threading.Thread`` is printed by the thread's
excepthook and lost: the test goes on and fails later with another error, or passes. A
``CheckedThread`` keeps what its target raised and raises it again from ``join()``, in the
test's own thread, with its traceback."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class CheckedThread(threading.Thread):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            super().run()
        except BaseException as e:  # noqa: BLE001 - kept for join(), whatever it is
            self.error = e

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def run_together(target: Callable[[], object], n: int, *, timeout: float = 30.0) -> None:
    """Run ``target`` in ``n`` threads at once and join them, raising what any of them raised."""
    threads = [CheckedThread(target=target) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
