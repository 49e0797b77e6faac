"""The naive baseline of the e2e benchmark: what a team glues together without this service.

A bare Celery task on its own Redis database that does ``requests.get`` and writes the body to a
file: no ledger, no claim, no lease, no retries, no receipts, no politeness. The e2e benchmark runs
it with the same pool (threads) and concurrency as the service's worker.

    celery -A bench.naive_app worker --pool threads --concurrency 100 --queues naive
"""

from __future__ import annotations

import os

import requests
from celery import Celery

app = Celery("naive", broker=os.environ.get("NAIVE_BROKER_URL", "redis://127.0.0.1:6379/2"))
app.conf.update(
    task_default_queue="naive",
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="naive.fetch")
def fetch(url: str, path: str) -> None:
    body = requests.get(url, timeout=30).content
    part = path + ".part"
    with open(part, "wb") as f:
        f.write(body)
    os.replace(part, path)  # a finished file is a finished job
