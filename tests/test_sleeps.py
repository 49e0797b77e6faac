"""The test suite's sleeps: a test waits for a condition with ``wait_for`` (tests/support/procs.py,
which says what it waited for); a sleep stays only where time itself is the subject (a backoff, a
rate, a pause the test measures, a delay a local target simulates), with a comment on its own line
or the line above saying why. This test lists every sleep that has neither."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SLEEP = re.compile(r"\bsleep\(")


def _uncommented_sleeps() -> list[str]:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if SLEEP.search(line) and "#" not in line and (i == 0 or "#" not in lines[i - 1]):
                found.append(f"{path.relative_to(TESTS.parent)}:{i + 1}: {line.strip()}")
    return found


def test_every_sleep_in_the_tests_says_why_time_is_its_subject() -> None:
    uncommented = _uncommented_sleeps()
    assert not uncommented, "sleeps without a comment (wait_for the condition, or say why):\n" + "\n".join(
        uncommented
    )
