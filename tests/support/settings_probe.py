"""Production settings read in a fresh interpreter: ``settings.base`` under exactly the given
environment (nothing of the test run's), running ``script`` (which prints what the test reads)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def settings_run(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "settings.base", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
