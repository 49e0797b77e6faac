"""Job ids (apps/jobs/ids.py): version 7 UUIDs, unique and increasing within a process even when
many request threads take them at once (the list cursor relies on the order)."""

from __future__ import annotations

import threading
import uuid

from apps.jobs.ids import uuid7


def test_ids_taken_by_many_threads_at_once_are_unique_version_7_and_increasing_per_thread() -> None:
    per_thread: list[list[uuid.UUID]] = [[] for _ in range(8)]
    start = threading.Barrier(len(per_thread))

    def take(out: list[uuid.UUID]) -> None:
        start.wait()
        out.extend(uuid7() for _ in range(5000))

    threads = [threading.Thread(target=take, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for out in per_thread for i in out]
    assert len(set(every)) == len(every)
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in every)
    assert all(out == sorted(out) for out in per_thread)
