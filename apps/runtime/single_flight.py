"""Single flight within a process: of the threads that ask for the same key at once, one does the
work and the others wait for its answer (NFR-11: a worker's 25 threads, each on its first job to a
new site, made 25 identical reads where one does).

A follower whose leader failed does the work itself, as it would have without the flight: the
leader's error is its own (its deadline, its connection), never handed to the others."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Flight(Generic[V]):
    __slots__ = ("answer", "answered", "done", "followers")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.answered = False
        self.answer: V | None = None
        self.followers = 0


class SingleFlight(Generic[K, V]):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flying: dict[K, _Flight[V]] = {}

    def run(
        self,
        key: K,
        work: Callable[[], V],
        *,
        wait_s: float | None = None,
        timed_out: Callable[[], Exception] | None = None,
    ) -> V:
        """``work()``'s answer, from this thread's call or from the call in flight for ``key``.
        A follower waits at most ``wait_s`` (None: as long as the leader takes), then raises
        ``timed_out()``."""
        with self._lock:
            flight = self._flying.get(key)
            leads = flight is None
            if flight is None:
                flight = self._flying[key] = _Flight()
            else:
                flight.followers += 1
        if not leads:
            if not flight.done.wait(wait_s):
                raise (timed_out() if timed_out is not None else TimeoutError(f"single flight of {key!r}"))
            if flight.answered:
                return flight.answer  # type: ignore[return-value]
            return work()
        try:
            flight.answer = work()
            flight.answered = True
            return flight.answer
        finally:
            with self._lock:
                self._flying.pop(key, None)
            flight.done.set()

    def followers(self, key: K) -> int:
        """How many threads have joined the call in flight for ``key`` (0: none in flight)."""
        with self._lock:
            flight = self._flying.get(key)
            return 0 if flight is None else flight.followers
