"""scrapejobs/asgi.py (the web process) and scrapejobs/wsgi.py: the web
process loads its URLconf and views at start and takes them out of the garbage collector's sight,
so that a full collection does not stall requests."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scrapejobs.processes import ROOT

# It loads the application in fresh interpreters: the whole suite's, not the fast loop's.
pytestmark = pytest.mark.e2e

PROBE = """
import gc, sys
import scrapejobs.{module}

assert "apps.intake.views" in sys.modules and "apps.query.views" in sys.modules, "views not loaded"
frozen = gc.get_freeze_count()
assert frozen > 50_000, frozen
print(frozen)
"""


@pytest.mark.parametrize("module", ["asgi", "wsgi"])
def test_the_application_module_loads_the_views_and_freezes_what_it_loaded(module: str) -> None:
    probe = PROBE.format(module=module)
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
