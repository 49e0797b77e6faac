"""Production defaults: no component starts with the public placeholder secret
key outside development; behind a TLS proxy, links are https:// and cookies and HSTS follow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings

from apps.jobs.ids import uuid7
from apps.results.storage import result_store
from tests.query import helpers
from tests.support.procs import ROOT, service_env

REFUSAL = "DJANGO_SECRET_KEY is not set"


def _env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    """A production-like environment: settings.base, no secret key, an empty run dir (so no
    development key from a `make run` of this checkout)."""
    env = service_env(DJANGO_SETTINGS_MODULE="settings.base", SCRAPEJOBS_RUN_DIR=str(tmp_path / "run"))
    env.pop("DJANGO_SECRET_KEY", None)
    env.pop("DJANGO_DEBUG", None)
    env.update(overrides)
    return env


def _run(argv: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


WEB = [sys.executable, "-c", "import scrapejobs.wsgi"]


@pytest.mark.e2e
@pytest.mark.django_db
def test_the_web_refuses_to_start_without_a_secret_key(tmp_path: Path) -> None:
    done = _run(WEB, _env(tmp_path))
    assert done.returncode != 0 and REFUSAL in done.stderr, done.stderr[-2000:]


@pytest.mark.e2e
@pytest.mark.django_db
@pytest.mark.parametrize(
    "component",
    [
        ["-m", "celery", "-A", "scrapejobs", "worker", "--pool", "threads", "-c", "1", "-Q", "nothing"],
        ["-m", "celery", "-A", "scrapejobs", "beat", "--schedule", "{tmp}/beat-schedule"],
    ],
    ids=["worker", "beat"],
)
def test_celery_processes_refuse_to_start_without_a_secret_key(tmp_path: Path, component: list[str]) -> None:
    argv = [sys.executable, *(a.replace("{tmp}", str(tmp_path)) for a in component)]
    done = _run(argv, _env(tmp_path), timeout=90)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and REFUSAL in output, output[-3000:]
    assert "ready" not in done.stdout


@pytest.mark.e2e  # fresh interpreters of the project: the whole suite's, not the fast loop's
@pytest.mark.django_db
def test_manage_py_reports_the_missing_secret_key_as_an_error(tmp_path: Path) -> None:
    done = _run([sys.executable, "manage.py", "check"], _env(tmp_path))
    assert done.returncode != 0 and "scrapejobs.E001" in done.stderr and REFUSAL in done.stderr


@pytest.mark.e2e  # fresh interpreters of the project, as above
@pytest.mark.django_db
def test_a_set_key_a_development_key_file_or_debug_lets_it_start(tmp_path: Path) -> None:
    assert _run(WEB, _env(tmp_path, DJANGO_SECRET_KEY="k" * 50)).returncode == 0
    assert _run(WEB, _env(tmp_path, DJANGO_DEBUG="true")).returncode == 0
    # What `make run` leaves behind (scrapejobs/supervise.py), read when the variable is unset.
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "secret-key").write_text("from-the-run-dir-" + "x" * 40 + "\n")
    code = "import scrapejobs.wsgi; from django.conf import settings; print(settings.SECRET_KEY)"
    done = _run([sys.executable, "-c", code], _env(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "from-the-run-dir-" + "x" * 40


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, "None False False 0"),
        (
            {"SCRAPEJOBS_BEHIND_TLS_PROXY": "true", "DJANGO_SECURE_HSTS_SECONDS": "31536000"},
            "('HTTP_X_FORWARDED_PROTO', 'https') True True 31536000",
        ),
        (
            {"SCRAPEJOBS_BEHIND_TLS_PROXY": "true", "DJANGO_SECURE_COOKIES": "false"},
            "('HTTP_X_FORWARDED_PROTO', 'https') False False 0",
        ),
    ],
)
def test_the_tls_proxy_cookie_and_hsts_variables_set_djangos_settings(
    tmp_path: Path, overrides: dict[str, str], expected: str
) -> None:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SECURE_PROXY_SSL_HEADER, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS)"
    )
    done = _run([sys.executable, "-c", code], _env(tmp_path, DJANGO_SECRET_KEY="k" * 50, **overrides))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == expected


@pytest.fixture
def stored_result(tmp_path: Path):
    backend = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path), "allow_overwrite": True},
    }
    static = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
    with override_settings(STORAGES={"default": backend, "results": backend, "staticfiles": static}):
        yield result_store(job_id=uuid7(), attempt=1, chunks=[b"hello"])


@pytest.mark.parametrize(("trusted", "scheme"), [(True, "https"), (False, "http")])
def test_result_links_behind_a_tls_proxy_are_https_only_when_the_proxy_is_trusted(
    make_tenant, stored_result, trusted: bool, scheme: str
) -> None:
    tenant, _, api = make_tenant()
    job = helpers.succeeded(tenant, key=stored_result.key)
    header = ("HTTP_X_FORWARDED_PROTO", "https") if trusted else None
    with override_settings(SECURE_PROXY_SSL_HEADER=header, SECURE_HSTS_SECONDS=600, PUBLIC_BASE_URL=""):
        r = api.get(f"/api/v1/jobs/{job.id}/result", HTTP_HOST="testserver", HTTP_X_FORWARDED_PROTO="https")
    assert r.status_code == 200, r.content
    assert r.json()["url"].startswith(f"{scheme}://testserver/results/")
    # HSTS only on what Django knows is https; a client's own header is not trusted.
    assert r.headers.get("Strict-Transport-Security") == ("max-age=600" if trusted else None)
