"""A Celery process imports what it runs, not the web's modules (NFR-42).

Each probe is a fresh interpreter taking a component's start-up path (Django set up, the Celery app,
its task modules, as ``celery worker`` and ``celery beat`` do through Celery's Django fixup) and
lists which of the heavy modules it loaded: the web's views and URLconf, the OpenAPI schema
(drf-spectacular's generator), DRF's serializers and pyarrow. They are imported where they are
used: the web process, a batch load, the export, the admin's manifest page."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from scrapejobs.processes import ROOT
from tests.support.procs import service_env

# Fresh interpreters: the whole suite's, not the fast loop's (as tests/test_wsgi.py).
pytestmark = pytest.mark.e2e

VIEWS = sorted(f"apps.{p.parent.name}.views" for p in (ROOT / "apps").glob("*/views.py"))
HEAVY = [
    *VIEWS,
    "scrapejobs.urls",
    "apps.api.schema",
    "drf_spectacular.openapi",
    "drf_spectacular.plumbing",
    "rest_framework.serializers",
    "apps.intake.serializers",
    "apps.batches.parts",
    "apps.batches.services",
    "apps.exports.export",
    "pyarrow",
    "numpy",
]

WORKER = """
import json, sys
import django

django.setup()
from scrapejobs.celery import app

app.loader.import_default_modules()
print(json.dumps({"tasks": sorted(app.tasks), "loaded": [m for m in %r if m in sys.modules]}))
"""

SCHEMA = """
import io, json
import django

django.setup()
from django.core.management import call_command

out = io.StringIO()
call_command("spectacular", "--format", "openapi-json", stdout=out)
print(json.dumps(json.loads(out.getvalue())["components"]["securitySchemes"]))
"""


# The control component's periodic tasks, each run once as beat would run it, against a database
# with no batch to load, announce or erase: a check that finds nothing to do imports nothing
# heavy. Two still do, and are left out here: the daily export (hourly, it checks for days to
# export through the exporter's module) and the orphaned parts' sweep (every 15 minutes, through
# the parts module); REQUIREMENTS.md's NFR-42 says so.
PERIODIC = """
import json, sys
import django

django.setup()
from scrapejobs.celery import _beat_schedule, app

app.loader.import_default_modules()
ran, loaded = [], {}
for name, entry in _beat_schedule().items():
    if name in %r:
        continue
    app.tasks[entry["task"]]()
    ran.append(name)
    loaded.update({m: name for m in %r if m in sys.modules and m not in loaded})
print(json.dumps({"ran": ran, "loaded": loaded}))
"""
STILL_HEAVY = ("exports-daily", "batches-orphans-remove")


def _run(probe: str, env: dict[str, str] | None = None, **environ: str) -> str:
    env = dict(env or os.environ)
    # The pytest process imported scrapejobs.celery, which set it: the probe must set it itself.
    env.pop("CELERY_SKIP_CHECKS", None)
    env.update(environ)
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_a_worker_starts_without_the_web_schema_or_pyarrow():
    found = json.loads(_run(WORKER % (HEAVY,)))
    assert len(VIEWS) >= 9  # the probe looks for every app's views
    # Every component's tasks are registered: the task modules were imported, their services not.
    for task in (
        "apps.scraping.tasks.scrape_job",
        "apps.batches.tasks.batch_load",
        "apps.exports.tasks.export_daily",
        "apps.erasure.tasks.batches_erase",
        "apps.writer.tasks.writer_flush",
    ):
        assert task in found["tasks"], task
    assert found["loaded"] == []


@pytest.mark.django_db(transaction=True)
def test_the_control_components_periodic_checks_with_nothing_to_do_import_nothing_heavy():
    """NFR-42: batches-erase and batches-resume (every 10 s) and batches-completion-announce
    (every 5 s) imported pyarrow, numpy and DRF's serializers in every control process within
    its first ten seconds, with no batch anywhere: 0.3 CPU-seconds each, in the middle of its
    work, and the modules held from then on."""
    found = json.loads(_run(PERIODIC % (STILL_HEAVY, HEAVY), env=service_env()))
    assert {"batches-erase", "batches-resume", "batches-completion-announce", "writer-flush"} <= set(
        found["ran"]
    )
    assert found["loaded"] == {}


def test_an_empty_celery_skip_checks_runs_the_checks_again():
    # docs/settings.md: the default (set by scrapejobs/celery.py) skips them; empty, Celery's
    # Django fixup runs them, and the URL checks import the views.
    found = json.loads(_run(WORKER % (HEAVY,), CELERY_SKIP_CHECKS=""))
    assert "apps.intake.views" in found["loaded"] and "scrapejobs.urls" in found["loaded"]


def test_building_the_schema_registers_the_bearer_token_extension_in_a_fresh_process():
    # apps/api/schema.py is imported by the schema class DRF reads where a schema is built, no
    # longer by ApiConfig.ready (NFR-42); without it the bearer scheme would be missing.
    schemes = json.loads(_run(SCHEMA))
    assert schemes == {
        "bearerToken": {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token of your tenant: `Authorization: Bearer sj_…`.",
        }
    }
