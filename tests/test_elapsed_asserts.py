"""The test suite's elapsed-time asserts: a test asserts an order or a count where one can stand for
the time taken ("the call returned after the release", "no run ended before the asks did"); an
assert on an elapsed time, an age or a length of time stays only where time itself is the subject
(a backoff, a cooldown, a token refill, a stop within a bound after a cancel), with a comment on its
own line or the line above saying what bound it holds and why. This test lists every such assert
that has neither (tests/support/ holds helpers, not asserts on behaviour, and is not scanned)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"
# time is the subject: the pattern names the asserts on a time taken or a length of time
TIMED_ASSERT = re.compile(r"assert .*(monotonic\(\)|elapsed|took|duration|_s\b|seconds).*[<>]=?")


def _uncommented_timed_asserts() -> list[str]:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if SUPPORT in path.parents:
            continue
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if TIMED_ASSERT.search(line) and "#" not in line and (i == 0 or "#" not in lines[i - 1]):
                found.append(f"{path.relative_to(TESTS.parent)}:{i + 1}: {line.strip()}")
    return found


def test_every_elapsed_time_assert_says_why_time_is_its_subject() -> None:
    uncommented = _uncommented_timed_asserts()
    assert not uncommented, (
        "asserts on a time taken without a comment (assert an order or a count, or say why):\n"
        + "\n".join(uncommented)
    )
