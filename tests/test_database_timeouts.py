"""A PostgreSQL that accepts and never answers fails a connection instead of hanging its process
(NFR-37; docs/settings.md, "PostgreSQL and Redis"): the connect timeout, TCP keepalives and
tcp_user_timeout are read from the environment into every connection's options."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests.support.procs import service_env
from tests.support.settings_probe import settings_run
from tests.support.tcp_proxy import TcpProxy

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = "connect_timeout keepalives keepalives_idle keepalives_interval keepalives_count tcp_user_timeout"

PRINT_OPTIONS = (
    "import json, settings.base as s; o = s.DATABASES['default']['OPTIONS']; "
    f"print(json.dumps({{k: o[k] for k in {OPTIONS.split()!r}}}))"
)


def _settings(**env: str) -> subprocess.CompletedProcess[str]:
    return settings_run(PRINT_OPTIONS, **env)


def test_every_postgresql_connection_has_the_documented_timeouts_by_default() -> None:
    done = _settings()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "connect_timeout": 10,
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
        "tcp_user_timeout": 30000,
    }


def test_the_timeouts_are_read_from_the_environment() -> None:
    done = _settings(
        SCRAPEJOBS_DB_CONNECT_TIMEOUT_S="3",
        SCRAPEJOBS_DB_KEEPALIVES_IDLE_S="5",
        SCRAPEJOBS_DB_KEEPALIVES_INTERVAL_S="2",
        SCRAPEJOBS_DB_KEEPALIVES_COUNT="4",
        SCRAPEJOBS_DB_TCP_USER_TIMEOUT_MS="7000",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "connect_timeout": 3,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 4,
        "tcp_user_timeout": 7000,
    }


@pytest.mark.parametrize(
    ("name", "value"),
    [("SCRAPEJOBS_DB_CONNECT_TIMEOUT_S", "0"), ("SCRAPEJOBS_DB_TCP_USER_TIMEOUT_MS", "-1")],
)
def test_a_timeout_out_of_its_range_stops_the_process(name: str, value: str) -> None:
    done = _settings(**{name: value})
    assert done.returncode != 0
    assert name in done.stderr


@pytest.fixture
def pg_proxy(db: None) -> Iterator[tuple[TcpProxy, str]]:
    """A proxy in front of the test database, and a DATABASE_URL through it (TCP)."""
    s = connection.settings_dict
    proxy = TcpProxy(upstream_host=s.get("HOST") or "127.0.0.1", upstream_port=int(s.get("PORT") or 5432))
    proxy.start()
    yield proxy, f"postgres://{s['USER']}@127.0.0.1:{proxy.port}/{s['NAME']}"
    proxy.stop()


def _connect(database_url: str) -> subprocess.CompletedProcess[str]:
    """A service process's first database connection, through Django's own settings."""
    env = service_env(
        DATABASE_URL=database_url, SCRAPEJOBS_DB_POOL="false", SCRAPEJOBS_DB_CONNECT_TIMEOUT_S="2"
    )
    code = "import django; django.setup(); from django.db import connection; connection.ensure_connection(); print('up')"
    # The subprocess' own bound only turns a hang into a failure of this test.
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_a_connection_to_a_postgresql_that_never_answers_fails_instead_of_hanging(
    pg_proxy: tuple[TcpProxy, str],
) -> None:
    proxy, url = pg_proxy
    assert _connect(url).stdout.strip() == "up"  # through the proxy, the same process connects

    proxy.black_hole()
    done = _connect(url)
    assert done.returncode != 0
    assert "timeout expired" in done.stderr, done.stderr[-2000:]
    assert proxy.held >= 1  # accepted and never answered: not refused

    proxy.restore()
    assert _connect(url).stdout.strip() == "up"
