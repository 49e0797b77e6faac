"""The S3 result storage: django-storages' S3Storage with bounded network calls (NFR-37;
docs/settings.md, "Storage").

boto3's defaults wait 60 s for each read and retry in its legacy mode; an S3 (or MinIO) endpoint that
accepts and never answers then holds an upload thread a minute per try, and an abandoned upload
(apps/results/storage.py gives one up at the attempt's deadline) keeps its thread and connection for
as long. Here every call has a connect timeout and a read timeout, retries in botocore's standard
mode for a bounded number of attempts (connection errors, timeouts, 5xx and throttling, with
backoff), and TCP keepalives on its connections. None of this bounds a transfer that trickles
(each read gets some bytes in time): the attempt's deadline does (SCRAPEJOBS_STORAGE_ALLOWANCE_S).

The options are plain numbers, so ``STORAGES`` stays plain data (printable, comparable): the
botocore ``Config`` is built here, from them and the options S3Storage would have built its own
from (its ``client_config`` replaces those, so they are carried over).
"""

from __future__ import annotations

from typing import Any

from botocore.config import Config
from storages.backends.s3 import S3Storage

# The options this class adds to S3Storage's, with their defaults (settings/base.py sets them).
NETWORK_OPTIONS = {"connect_timeout_s": 10.0, "read_timeout_s": 30.0, "max_attempts": 3}


def client_config(
    *,
    connect_timeout_s: float,
    read_timeout_s: float,
    max_attempts: int,
    addressing_style: str | None = None,
    signature_version: str | None = None,
    proxies: dict[str, str] | None = None,
) -> Config:
    return Config(
        s3={"addressing_style": addressing_style},
        signature_version=signature_version,
        proxies=proxies,
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
        # total_max_attempts counts the first try (botocore's max_attempts does not).
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        tcp_keepalive=True,
    )


class ResultsS3Storage(S3Storage):
    def __init__(self, **options: Any) -> None:
        network = {name: options.pop(name, default) for name, default in NETWORK_OPTIONS.items()}
        super().__init__(**options)
        self.client_config = client_config(
            **network,
            addressing_style=self.addressing_style,
            signature_version=self.signature_version,
            proxies=self.proxies,
        )
