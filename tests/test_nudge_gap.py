"""The control process's nudged runs (scrapejobs/nudge_listener.py): each kind runs at least
``SCRAPEJOBS_NUDGE_GAP_S`` apart however often it is poked, so that a stream of receipts makes
fewer, larger publisher and writer runs (NFR-11, docs/settings.md)."""

from __future__ import annotations

import threading
import time

import pytest
from django.test import override_settings

from scrapejobs.nudge_listener import NudgeListener
from tests.support.procs import wait_for
from tests.support.settings_probe import settings_run


def test_the_gap_comes_from_its_setting():
    with override_settings(SCRAPEJOBS_NUDGE_GAP_S=0.3):
        listener = NudgeListener({"sj:nudge:publish": lambda: None})
    assert listener.gap_s == 0.3
    assert [r.gap_s for r in listener.runners.values()] == [0.3]
    assert NudgeListener({}, gap_s=0.02).gap_s == 0.02


@pytest.mark.parametrize("gap_s", [0.05, 0.2])
def test_runs_poked_without_pause_start_at_least_the_gap_apart(gap_s: float):
    starts: list[float] = []
    listener = NudgeListener({"sj:nudge:publish": lambda: starts.append(time.monotonic())}, gap_s=gap_s)
    (runner,) = listener.runners.values()
    runner.thread.start()
    poking = threading.Event()

    def poke() -> None:
        while not poking.is_set():
            runner.poke()
            time.sleep(0.001)  # a receipt a millisecond

    threading.Thread(target=poke, daemon=True).start()
    try:
        wait_for(lambda: len(starts) >= 5, timeout=30, interval=0.01, what="five nudged runs")
    finally:
        poking.set()
        listener.stop.set()  # the runner's own thread only: the Redis listener was never started
        runner.thread.join(5)
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    # time is the subject: the gap between two runs' starts is the setting's, never less
    assert min(gaps) >= gap_s * 0.99, gaps


@pytest.mark.parametrize(("value", "refused"), [("0.1", False), ("0.25", False), ("0", True), ("6", True)])
def test_a_gap_out_of_its_range_stops_the_process_at_start(value: str, refused: bool):
    done = settings_run(
        "from django.conf import settings; print(settings.SCRAPEJOBS_NUDGE_GAP_S)",
        SCRAPEJOBS_NUDGE_GAP_S=value,
    )
    if refused:
        assert (
            done.returncode != 0
            and f"SCRAPEJOBS_NUDGE_GAP_S={float(value)} is outside 0.01..5.0" in done.stderr
        )
    else:
        assert done.returncode == 0, done.stderr
        assert float(done.stdout) == float(value)
