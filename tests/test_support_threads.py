"""tests/support/threads.py: what a thread raises reaches the test that joins it."""

from __future__ import annotations

import pytest

from tests.support.threads import CheckedThread


def test_an_assertion_in_a_thread_is_raised_by_join() -> None:
    def fails() -> None:
        assert 1 == 2, "inside the thread"

    t = CheckedThread(target=fails)
    t.start()
    with pytest.raises(AssertionError, match="inside the thread"):
        t.join()


def test_a_thread_that_ends_well_joins_quietly() -> None:
    done: list[int] = []
    t = CheckedThread(target=done.append, args=(1,))
    t.start()
    t.join()
    assert done == [1]
