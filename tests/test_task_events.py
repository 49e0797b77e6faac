"""SCRAPEJOBS_TASK_EVENTS: per-task Celery events are off unless the operator asks, in
the workers' settings and in what Flower asks the workers for."""

import subprocess
import sys

import pytest

from scrapejobs import processes
from tests.support.procs import ROOT

pytestmark = pytest.mark.e2e  # starts Celery workers: the whole suite's, not the fast loop's


def _celery_events(**env: str) -> str:
    code = (
        "import django; django.setup(); from scrapejobs.celery import app;"
        "print(app.conf.worker_send_task_events, app.conf.task_send_sent_event)"
    )
    import os

    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "settings.base", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("value", "expected"), [(None, "False False"), ("true", "True True"), ("false", "False False")]
)
def test_task_events_follow_the_setting(value, expected, monkeypatch):
    monkeypatch.delenv("SCRAPEJOBS_TASK_EVENTS", raising=False)
    assert _celery_events(**({} if value is None else {"SCRAPEJOBS_TASK_EVENTS": value})) == expected


def test_flower_asks_the_workers_for_task_events_only_when_they_are_on():
    assert "--enable_events=False" in processes.from_env("flower", {})
    assert "--enable_events=True" in processes.from_env("flower", {"SCRAPEJOBS_TASK_EVENTS": "true"})
