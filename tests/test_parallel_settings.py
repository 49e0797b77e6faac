"""`make test-fast` runs the suite in parallel processes (pytest-xdist): settings/test.py gives each
its own Redis databases and results directory, so one process's flush or clean-up never reaches
another's. Each worker's settings are read in a fresh interpreter, as xdist starts them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.e2e  # fresh interpreters of the app


def _settings_of(worker: str | None) -> tuple[str, str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTEST_XDIST_WORKER", "SCRAPEJOBS_TEST_XDIST_WORKER", "CELERY_BROKER_URL")
    }
    env.update(DJANGO_SETTINGS_MODULE="settings.test", REDIS_URL="redis://127.0.0.1:6399/0")
    env.pop("SCRAPEJOBS_RESULTS_DIR", None)
    if worker:
        env["PYTEST_XDIST_WORKER"] = worker
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.REDIS_URL); print(s.CELERY_BROKER_URL); print(s.SCRAPEJOBS_RESULTS_DIR)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    redis_url, broker_url, results = done.stdout.split()
    return redis_url, broker_url, results


def test_each_parallel_worker_has_its_own_redis_databases_and_results_directory() -> None:
    alone = _settings_of(None)
    assert alone[:2] == ("redis://127.0.0.1:6399/0", "redis://127.0.0.1:6399/1")  # make test
    workers = [_settings_of(f"gw{n}") for n in range(4)]
    databases = [url.rsplit("/", 1)[1] for w in [alone, *workers] for url in w[:2]]
    assert len(set(databases)) == len(databases), databases  # no two share a database
    assert len({w[2] for w in [alone, *workers]}) == 5  # nor a results directory
    assert all(url.startswith("redis://127.0.0.1:6399/") for w in workers for url in w[:2])


def test_a_service_process_started_by_a_parallel_worker_talks_to_that_workers_databases() -> None:
    """A worker, writer or control component a test starts inherits the test process's environment
    (tests/support/procs.py service_env), PYTEST_XDIST_WORKER included: it must not move the
    databases again."""
    worker = _settings_of("gw1")
    code = (
        "import os, subprocess, sys, django; django.setup(); "
        "child = 'import django; django.setup(); from django.conf import settings as s; "
        "print(s.REDIS_URL); print(s.CELERY_BROKER_URL); print(s.SCRAPEJOBS_RESULTS_DIR)'; "
        "sys.stdout.write(subprocess.run([sys.executable, '-c', child], env=dict(os.environ), "
        "capture_output=True, text=True, check=True).stdout)"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SCRAPEJOBS_TEST_XDIST_WORKER", "CELERY_BROKER_URL", "SCRAPEJOBS_RESULTS_DIR")
    }
    env.update(
        DJANGO_SETTINGS_MODULE="settings.test",
        REDIS_URL="redis://127.0.0.1:6399/0",
        PYTEST_XDIST_WORKER="gw1",
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert tuple(done.stdout.split()) == worker
