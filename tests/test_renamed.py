"""Old names kept for one release: each still works, says once that it is deprecated, and gives
way to the new name when both are set.

- the control component was called ``writer`` (``python -m scrapejobs.processes writer``,
  ``docker/start.sh writer``), its concurrency ``SCRAPEJOBS_WRITER_CONCURRENCY``;
- a job's lease length was ``SCRAPEJOBS_LEASE_SECONDS`` (now ``SCRAPEJOBS_LEASE_S``, as every other
  duration in seconds).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scrapejobs import processes

ROOT = Path(__file__).resolve().parent.parent
PROCESS_VARS = ("SCRAPEJOBS_CONTROL_CONCURRENCY", "SCRAPEJOBS_WRITER_CONCURRENCY")


def _print(component: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in PROCESS_VARS}
    return subprocess.run(
        [sys.executable, "-m", "scrapejobs.processes", component, "--print"],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "_warned", set())


def test_the_old_component_name_starts_the_control_component_with_a_warning() -> None:
    new, old = _print("control"), _print("writer")
    assert old.stdout == new.stdout and "--hostname control@%h" in new.stdout
    assert new.stderr == ""
    assert "writer is deprecated" in old.stderr and "control" in old.stderr


def test_the_old_component_name_warns_once_per_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert processes.from_env("writer", {}) == processes.from_env("control", {}) == processes.control()
    processes.from_env("writer", {})
    assert capsys.readouterr().err.count("deprecated") == 1


def test_the_old_concurrency_setting_is_read_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    argv = processes.from_env("control", {"SCRAPEJOBS_WRITER_CONCURRENCY": "3"})
    assert argv[argv.index("--concurrency") + 1] == "3"
    err = capsys.readouterr().err
    assert "SCRAPEJOBS_WRITER_CONCURRENCY is deprecated" in err and "SCRAPEJOBS_CONTROL_CONCURRENCY" in err


def test_the_new_concurrency_setting_takes_precedence_without_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = processes.from_env(
        "control", {"SCRAPEJOBS_CONTROL_CONCURRENCY": "5", "SCRAPEJOBS_WRITER_CONCURRENCY": "3"}
    )
    assert argv[argv.index("--concurrency") + 1] == "5"
    argv = processes.from_env("control", {})
    assert argv[argv.index("--concurrency") + 1] == "8"
    assert capsys.readouterr().err == ""


def test_docker_start_sh_accepts_the_old_component_name() -> None:
    script = (ROOT / "docker" / "start.sh").read_text()
    assert "| control | writer |" in script


def _lease_s(**env: str) -> tuple[str, str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("SCRAPEJOBS_LEASE_S", "SCRAPEJOBS_LEASE_SECONDS")
    }
    done = subprocess.run(
        [sys.executable, "-c", "import settings.base as s; print(s.SCRAPEJOBS_LEASE_S)"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "settings.base", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip(), done.stderr


def test_the_old_lease_setting_is_read_with_a_warning() -> None:
    value, err = _lease_s(SCRAPEJOBS_LEASE_SECONDS="17")
    assert value == "17"
    assert "SCRAPEJOBS_LEASE_SECONDS is deprecated" in err and "SCRAPEJOBS_LEASE_S " in err


def test_the_new_lease_setting_takes_precedence_without_a_warning() -> None:
    value, err = _lease_s(SCRAPEJOBS_LEASE_S="23", SCRAPEJOBS_LEASE_SECONDS="17")
    assert value == "23" and "deprecated" not in err
    value, err = _lease_s()
    assert value == "60" and "deprecated" not in err
