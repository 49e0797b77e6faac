"""The nudge listener's stop runs in Celery's SIGTERM handler (worker_shutting_down); a second
signal during the first stop's join runs it again on the same thread. That second stop must
return, not wait for the first (a control worker once never exited: make run's orphans test)."""

from __future__ import annotations

import threading

import pytest

from scrapejobs import nudge_listener


def test_a_stop_inside_a_stop_returns_and_the_listener_is_closed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closes: list[str] = []
    listener = nudge_listener.NudgeListener({})

    def close(timeout: float = 5.0) -> None:
        closes.append("close")
        nudge_listener.nudge_listener_stop()  # what a second SIGTERM during the join does

    monkeypatch.setattr(listener, "close", close)
    monkeypatch.setattr(nudge_listener, "_listener", (nudge_listener.os.getpid(), listener))
    done = threading.Event()

    def stop() -> None:
        nudge_listener.nudge_listener_stop()
        done.set()

    threading.Thread(target=stop, daemon=True).start()
    assert done.wait(10), "the stop inside a stop waited for ever"
    assert closes == ["close"]
    assert nudge_listener._listener is None
