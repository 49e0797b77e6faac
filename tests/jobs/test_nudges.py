"""Background nudges (NFR-1, NFR-2): asking never waits on the work, a burst of asks is
folded into few runs, and a failing run is logged and does not stop the next ones."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from apps.jobs.nudges import BackgroundNudge
from apps.redis_clients import WarnEvery
from tests.support.procs import wait_for


def test_asking_returns_at_once_however_slow_the_nudge_is() -> None:
    release = threading.Event()
    runs: list[float] = []
    ended: list[float] = []

    def slow() -> None:
        runs.append(time.monotonic())
        release.wait(10)
        ended.append(time.monotonic())

    nudge = BackgroundNudge(slow, name="slow nudge", min_interval_s=0.0)
    for _ in range(1000):
        nudge.ask()
    # Every ask returned before any run ended: none waited on the work (the first run waits for
    # the release below, or 10 s).
    assert ended == []
    wait_for(lambda: runs, timeout=5, what="the first run")
    release.set()
    # Everything asked while the first run was blocked is folded into at most one more run.
    # time is the subject: a window in which a third run, were there one, would start
    time.sleep(0.2)
    assert len(runs) <= 2


def test_a_burst_of_asks_runs_at_most_once_per_interval() -> None:
    runs: list[float] = []
    nudge = BackgroundNudge(lambda: runs.append(time.monotonic()), name="counted", min_interval_s=0.05)
    started = time.monotonic()
    while time.monotonic() - started < 0.5:
        nudge.ask()
        # time is the subject: asks spread over 0.5 s, to count runs per interval
        time.sleep(0.001)
    # time is the subject: the last interval ends, so its folded run has happened
    time.sleep(0.1)
    assert 2 <= len(runs) <= 0.6 / 0.05 + 1
    gaps = [b - a for a, b in zip(runs, runs[1:], strict=False)]
    # time is the subject: runs at least one 0.05 s interval apart, less 5 ms of timer slack
    assert min(gaps) >= 0.045


def test_a_nudge_that_fails_is_logged_and_the_next_ask_still_runs(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("redis is down")

    nudge = BackgroundNudge(flaky, name="flaky nudge", min_interval_s=0.0)
    with caplog.at_level(logging.WARNING, logger="apps.jobs.nudges"):
        nudge.ask()
        wait_for(
            lambda: "flaky nudge failed" in caplog.text, timeout=5, what="the first run's failure logged"
        )
        nudge.ask()
        wait_for(lambda: len(calls) == 2, timeout=5, what="the run after the failure")
    assert "flaky nudge failed (redis is down)" in caplog.text


def test_a_repeated_warning_is_logged_once_per_interval_with_the_count_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    warn = WarnEvery(logging.getLogger("tests.warn_every"), interval_s=0.2)
    with caplog.at_level(logging.WARNING, logger="tests.warn_every"):
        for _ in range(50):
            warn("redis down")
        # time is the subject: the 0.2 s warning interval passes
        time.sleep(0.25)
        warn("redis down")
    assert [r.getMessage() for r in caplog.records] == [
        "redis down",
        "redis down (49 more like this not logged)",
    ]
