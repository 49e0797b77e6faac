"""The tuned baseline of the e2e benchmark: the bare Celery task a competent engineer would ship
with the same stack, doing what the naive one does (fetch, write the body to a file) without its
waste:

- WARNING logs, no result backend (``task_ignore_result``), no remote control, no heartbeats, no
  rate limits, prefetch 1;
- kombu's ack emulation off: the task is acknowledged when it starts (Celery's default, as the
  service's scrape worker does), so the Redis transport's unacked bookkeeping buys nothing;
- one ``requests.Session`` per worker thread, keep-alive, so a job reuses its thread's connection
  to the target (no new TCP connection per job);
- messages published through one producer from the pool (``run()`` of bench/e2e.py).

    celery -A bench.tuned_app worker --pool threads --concurrency 100 --queues tuned \
        --loglevel WARNING --without-mingle --without-gossip --without-heartbeat --prefetch-multiplier 1
"""

from __future__ import annotations

import os
import threading

import requests
from celery import Celery
from celery.signals import worker_ready
from requests.adapters import HTTPAdapter

app = Celery("tuned", broker=os.environ.get("TUNED_BROKER_URL", "redis://127.0.0.1:6379/2"))
app.conf.update(
    task_default_queue="tuned",
    task_ignore_result=True,
    task_acks_late=False,
    worker_prefetch_multiplier=1,
    worker_enable_remote_control=False,
    worker_disable_rate_limits=True,
    worker_send_task_events=False,
    broker_heartbeat=0,
    broker_pool_limit=1,
    broker_transport_options={"ack_emulation": False},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

_local = threading.local()


def _session() -> requests.Session:
    session = getattr(_local, "session", None)
    if session is None:
        session = requests.Session()
        session.mount("http://", HTTPAdapter(pool_connections=1, pool_maxsize=1))
        _local.session = session
    return session


@app.task(name="tuned.fetch")
def fetch(url: str, path: str) -> None:
    with _session().get(url, timeout=30) as response:
        body = response.content
    part = path + ".part"
    with open(part, "wb") as f:
        f.write(body)
    os.replace(part, path)  # a finished file is a finished job


@worker_ready.connect
def _ready(**_: object) -> None:
    # Its logs are at WARNING, where Celery's own "ready." line is not: the benchmark waits for this.
    print("tuned worker ready.", flush=True)
