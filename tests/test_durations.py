"""make test's parallel phase starts the longest tests first (tests/support/durations.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from tests.support import durations


def _item(nodeid: str, *, e2e: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        nodeid=nodeid, get_closest_marker=lambda name: object() if e2e and name == "e2e" else None
    )


def test_tests_run_longest_first_with_unknown_process_starting_ones_at_their_default() -> None:
    items = [
        _item("a"),
        _item("b_e2e_unknown", e2e=True),
        _item("c", e2e=True),
        _item("d"),
        _item("e_e2e_unknown", e2e=True),
        _item("f"),
        _item("m.py::g[x-1]@heavy"),  # its xdist_group appended by --dist loadgroup
    ]
    known = {"c": 120.0, "d": 2.5, "f": 7.0, "m.py::g[x-1]": 9.0}
    durations.longest_first(items, known)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "c", "m.py::g[x-1]@heavy", "f", "b_e2e_unknown", "e_e2e_unknown", "d", "a"
    ]  # fmt: skip


def test_a_recorded_run_merges_into_the_file_and_leaves_short_tests_out(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    path.write_text(json.dumps({"other_phase": 40.0, "ran_again": 9.0, "now_short": 5.0}))
    recorder = durations.Recorder(path)
    for nodeid, phase_s in [
        ("ran_again", 1.0),
        ("ran_again", 2.25),
        ("ran_again", 0.5),
        ("now_short", 0.2),
        ("new", 12.0),
        ("m.py::grouped[a@b]@heavy", 2.0),  # recorded without its xdist_group
    ]:
        recorder.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=phase_s))  # type: ignore[arg-type]
    recorder.pytest_sessionfinish(None)  # type: ignore[arg-type]
    assert json.loads(path.read_text()) == {
        "other_phase": 40.0, "new": 12.0, "ran_again": 3.8, "m.py::grouped[a@b]": 2.0
    }  # fmt: skip
    assert list(json.loads(path.read_text())) == ["other_phase", "new", "ran_again", "m.py::grouped[a@b]"]


def test_the_committed_file_reads_and_names_tests_of_this_tree() -> None:
    known = durations.load()
    assert len(known) >= 50 and all(s >= durations.KEEP_FROM_S for s in known.values())
    files = {nodeid.split("::", 1)[0] for nodeid in known}
    root = durations.FILE.parent.parent
    assert [f for f in files if not (root / f).is_file()] == []
