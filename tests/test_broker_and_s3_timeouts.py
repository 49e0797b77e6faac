"""A broker Redis or an S3 endpoint that accepts and never answers fails a call instead of hanging
its process (NFR-37; docs/settings.md, "PostgreSQL and Redis" and "Storage"): the broker's socket,
connect and keepalive bounds and its health checks reach kombu's transport options, and the S3
storage's connect and read timeouts, bounded retries and keepalives reach its botocore client."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from apps.results.s3 import ResultsS3Storage
from tests.support.settings_probe import settings_run

PRINT = (
    "import json, settings.base as s; o = dict(s.CELERY_BROKER_TRANSPORT_OPTIONS); "
    "o['socket_keepalive_options'] = sorted(o['socket_keepalive_options'].items()); "
    "print(json.dumps({'broker': o, 's3': s.STORAGES['results']['OPTIONS']}))"
)
S3 = {"SCRAPEJOBS_STORAGE": "s3", "SCRAPEJOBS_S3_BUCKET": "b"}


def _settings(**env: str) -> subprocess.CompletedProcess[str]:
    return settings_run(PRINT, **env)


def _keepalive(idle: int, interval: int) -> list[list[int]]:
    return sorted([[socket.TCP_KEEPIDLE, idle], [socket.TCP_KEEPINTVL, interval], [socket.TCP_KEEPCNT, 3]])


def test_the_broker_and_s3_have_the_documented_bounds_by_default() -> None:
    done = _settings(**S3)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["broker"] == {
        "visibility_timeout": 3600,
        "socket_timeout": 30,
        "socket_connect_timeout": 10,
        "socket_keepalive": True,
        "socket_keepalive_options": _keepalive(30, 10),
        "health_check_interval": 25,
    }
    s3 = out["s3"]
    assert (s3["connect_timeout_s"], s3["read_timeout_s"], s3["max_attempts"]) == (10.0, 30.0, 3)


def test_the_bounds_are_read_from_the_environment() -> None:
    done = _settings(
        **S3,
        SCRAPEJOBS_BROKER_SOCKET_TIMEOUT_S="4",
        SCRAPEJOBS_BROKER_CONNECT_TIMEOUT_S="2",
        SCRAPEJOBS_BROKER_KEEPALIVE_IDLE_S="6",
        SCRAPEJOBS_BROKER_HEALTH_CHECK_INTERVAL_S="3",
        SCRAPEJOBS_S3_CONNECT_TIMEOUT_S="1.5",
        SCRAPEJOBS_S3_READ_TIMEOUT_S="2.5",
        SCRAPEJOBS_S3_MAX_ATTEMPTS="5",
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    broker = out["broker"]
    assert (broker["socket_timeout"], broker["socket_connect_timeout"], broker["health_check_interval"]) == (
        4,
        2,
        3,
    )
    assert broker["socket_keepalive_options"] == _keepalive(6, 2)
    s3 = out["s3"]
    assert (s3["connect_timeout_s"], s3["read_timeout_s"], s3["max_attempts"]) == (1.5, 2.5, 5)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        # Not below 2 s: kombu's BRPOP waits 1 s on the server's side.
        ("SCRAPEJOBS_BROKER_SOCKET_TIMEOUT_S", "1"),
        ("SCRAPEJOBS_BROKER_CONNECT_TIMEOUT_S", "0"),
        ("SCRAPEJOBS_BROKER_HEALTH_CHECK_INTERVAL_S", "0"),
        ("SCRAPEJOBS_S3_READ_TIMEOUT_S", "0"),
        ("SCRAPEJOBS_S3_MAX_ATTEMPTS", "0"),
    ],
)
def test_a_bound_out_of_its_range_stops_the_process(name: str, value: str) -> None:
    done = _settings(**S3, **{name: value})
    assert done.returncode != 0
    assert name in done.stderr


def test_the_s3_storage_gives_its_client_the_bounds_and_keeps_the_addressing_and_signature() -> None:
    storage = ResultsS3Storage(
        bucket_name="b",
        addressing_style="virtual",
        signature_version="s3v4",
        connect_timeout_s=1.5,
        read_timeout_s=2.5,
        max_attempts=5,
    )
    config = storage.client_config
    assert (config.connect_timeout, config.read_timeout, config.tcp_keepalive) == (1.5, 2.5, True)
    assert config.retries == {"mode": "standard", "total_max_attempts": 5}
    assert (config.s3, config.signature_version) == ({"addressing_style": "virtual"}, "s3v4")
    # The client built from it has them too (botocore's own view of the config).
    client = storage.connection.meta.client
    assert client.meta.config.read_timeout == 2.5
    assert client.meta.config.retries["total_max_attempts"] == 5
