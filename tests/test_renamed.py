"""Old names kept for one release: each still works, says once that it is deprecated, and gives
way to the new name when both are set.

- a job's lease length was ``SCRAPEJOBS_LEASE_SECONDS`` (now ``SCRAPEJOBS_LEASE_S``, as every other
  duration in seconds).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
