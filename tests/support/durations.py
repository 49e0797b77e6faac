"""How long each test took last time, for make test's parallel phase to start the longest first.

``tests/durations.json`` maps a test's node id to its seconds (setup, call and teardown) as a
recorded run measured them (``make test PYTEST_ARGS=--record-durations`` rewrites it: each
phase merges its own tests into the file). The parallel phase hands tests out in their collection
order, so the order is a schedule: a 130 s test collected last keeps one process busy while the
others idle at the end (make test's tail at half the machine's CPU, measured). Longest first, a
test missing from the file counted at ``UNKNOWN_E2E_S`` when it starts processes and at nothing
otherwise. A stale file costs time, never a result: it only orders."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

FILE = Path(__file__).resolve().parents[1] / "durations.json"
UNKNOWN_E2E_S = 3.0
# Tests under this many seconds are left out of the file: their order matters little and a file of
# every test would change with every run.
KEEP_FROM_S = 1.0


def load(path: Path = FILE) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()}


# pytest-xdist's ``--dist loadgroup`` appends a test's ``xdist_group`` to its node id
# (``…::test_x@group``), before or after this file's hooks see it: the file names tests without it.
_GROUP = re.compile(r"@[^\]/:@]+$")


def plain_nodeid(nodeid: str) -> str:
    return _GROUP.sub("", nodeid)


def expected_s(item: pytest.Item, known: dict[str, float]) -> float:
    if plain_nodeid(item.nodeid) in known:
        return known[plain_nodeid(item.nodeid)]
    return UNKNOWN_E2E_S if item.get_closest_marker("e2e") is not None else 0.0


def longest_first(items: list[pytest.Item], known: dict[str, float]) -> None:
    """Sort in place, longest expected first; ties keep their collection order (sort is stable)."""
    items.sort(key=lambda item: -expected_s(item, known))


class Recorder:
    """Adds up each test's reported phases and merges them into the file at the session's end
    (on the process that gets every report: xdist's controller, or the only process)."""

    def __init__(self, path: Path = FILE):
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[plain_nodeid(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.seconds:
            return
        merged = load(self.path)
        for nodeid, seconds in self.seconds.items():
            merged.pop(nodeid, None)
            if seconds >= KEEP_FROM_S:
                merged[nodeid] = round(seconds, 1)
        ordered = dict(sorted(merged.items(), key=lambda kv: (-kv[1], kv[0])))
        self.path.write_text(json.dumps(ordered, indent=0) + "\n")
