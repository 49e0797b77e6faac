"""apps/runtime/single_flight.py (NFR-11): of the threads that ask for one key at once, one does
the work and the others are handed its answer; a leader's failure stays its own."""

from __future__ import annotations

import threading

import pytest

from apps.runtime.single_flight import SingleFlight
from tests.support.procs import wait_for
from tests.support.threads import CheckedThread


def _ask_together(flights: SingleFlight, key: str, work, n: int) -> tuple[list[object], list[CheckedThread]]:
    answers: list[object] = []
    threads = [CheckedThread(target=lambda: answers.append(flights.run(key, work))) for _ in range(n)]
    for t in threads:
        t.start()
    return answers, threads


def test_twenty_threads_asking_at_once_do_the_work_once_and_all_get_its_answer():
    flights: SingleFlight[str, int] = SingleFlight()
    release = threading.Event()
    calls: list[int] = []

    def work() -> int:
        calls.append(1)
        assert release.wait(30)
        return 42

    answers, threads = _ask_together(flights, "k", work, 20)
    wait_for(lambda: flights.followers("k") == 19, timeout=30, interval=0.01, what="19 followers")
    release.set()
    for t in threads:
        t.join(30)
    assert (len(calls), answers) == (1, [42] * 20)
    assert flights.followers("k") == 0
    assert flights.run("k", lambda: 7) == 7  # nothing in flight: the next asker works afresh


def test_other_keys_fly_on_their_own():
    flights: SingleFlight[str, str] = SingleFlight()
    release = threading.Event()
    held = CheckedThread(target=lambda: flights.run("a", lambda: (release.wait(30), "a")[1]))
    held.start()
    wait_for(lambda: flights.followers("a") == 0 and len(flights._flying) == 1, timeout=30, interval=0.01)
    assert flights.run("b", lambda: "b") == "b"  # not held up by a's flight
    release.set()
    held.join(30)


def test_followers_of_a_leader_that_failed_do_the_work_themselves():
    flights: SingleFlight[str, str] = SingleFlight()
    release = threading.Event()
    calls: list[str] = []

    def work() -> str:
        name = threading.current_thread().name
        calls.append(name)
        if len(calls) == 1:
            assert release.wait(30)
            raise ConnectionError("the leader's own connection broke")
        return name

    leader = CheckedThread(target=lambda: flights.run("k", work), name="leader")
    leader.start()
    wait_for(lambda: len(calls) == 1, timeout=30, interval=0.01, what="the leader at work")
    answers: dict[str, str] = {}
    followers = [
        CheckedThread(
            target=lambda: answers.update({threading.current_thread().name: flights.run("k", work)}),
            name=f"f{i}",
        )
        for i in range(3)
    ]
    for t in followers:
        t.start()
    wait_for(lambda: flights.followers("k") == 3, timeout=30, interval=0.01, what="3 followers")
    release.set()
    with pytest.raises(ConnectionError):
        leader.join(30)
    for t in followers:
        t.join(30)
    assert answers == {f"f{i}": f"f{i}" for i in range(3)}  # each its own answer, no error
    assert sorted(calls) == ["f0", "f1", "f2", "leader"]


def test_a_follower_waits_at_most_its_wait_then_raises_what_it_was_told():
    flights: SingleFlight[str, str] = SingleFlight()
    release = threading.Event()
    leader = CheckedThread(target=lambda: flights.run("k", lambda: (release.wait(30), "late")[1]))
    leader.start()
    wait_for(lambda: len(flights._flying) == 1, timeout=30, interval=0.01, what="a flight")
    with pytest.raises(LookupError, match="gave up"):
        flights.run("k", lambda: "never", wait_s=0.05, timed_out=lambda: LookupError("gave up"))
    release.set()
    leader.join(30)
