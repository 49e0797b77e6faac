"""The command lines of the service's processes, in one place.

``make run`` (scrapejobs/supervise.py), the end-to-end tests, the benchmarks and docker/ all start
the same components with these argv lists; the README shows them for running on several machines:

- web     gunicorn serving the API, admin, docs and signed result links
- worker  Celery worker on the scrape queues (threads: a fetch mostly waits on the network)
- writer  Celery worker on the control queue: outbox publisher, sweeper, receipt writer, webhooks
- beat    Celery beat: the periodic tasks of scrapejobs/celery.py
- flower  Celery's monitoring UI
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def _celery() -> list[str]:
    return [str(BIN / "celery"), "-A", "scrapejobs"]


def web(*, host: str = "127.0.0.1", port: int = 8000, workers: int = 2, threads: int = 16) -> list[str]:
    return [
        str(BIN / "gunicorn"),
        "scrapejobs.wsgi:application",
        "--bind",
        f"{host}:{port}",
        "--workers",
        str(workers),
        "--worker-class",
        "gthread",
        "--threads",
        str(threads),
        "--access-logfile",
        "-",
        "--graceful-timeout",
        "20",
    ]


def worker(*, concurrency: int | None = None, name: str = "worker") -> list[str]:
    conc = concurrency or int(os.environ.get("SCRAPEJOBS_WORKER_CONCURRENCY", "100"))
    return [
        *_celery(),
        "worker",
        "--loglevel",
        "INFO",
        "--queues",
        "jobs.high,jobs.normal,jobs.low",
        "--pool",
        "threads",
        "--concurrency",
        str(conc),
        "--hostname",
        f"{name}@%h",
        "--without-mingle",
        "--without-gossip",
    ]


def writer(*, concurrency: int = 8, name: str = "writer") -> list[str]:
    return [
        *_celery(),
        "worker",
        "--loglevel",
        "INFO",
        "--queues",
        "control,webhooks",
        "--pool",
        "threads",
        "--concurrency",
        str(concurrency),
        "--hostname",
        f"{name}@%h",
        "--without-mingle",
        "--without-gossip",
    ]


def beat(*, schedule_file: str = ".run/celerybeat-schedule") -> list[str]:
    Path(schedule_file).parent.mkdir(parents=True, exist_ok=True)
    return [*_celery(), "beat", "--loglevel", "INFO", "--schedule", schedule_file]


def flower(*, host: str = "127.0.0.1", port: int = 5555) -> list[str]:
    return [*_celery(), "flower", f"--address={host}", f"--port={port}"]
