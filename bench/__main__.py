"""``python -m bench [name]``: run one benchmark, or all of them, each printing ``name: figure``
lines. ``make bench`` (``make bench BENCH=intake``) runs this with DATABASE_URL and REDIS_URL set
(embedded servers when none are given).

Benchmarks: intake (POST /jobs against a bare Django view), e2e (2,000 jobs through the whole
service against a bare Celery task doing requests.get), writer (receipts through the leased writer
against one transaction per receipt), politeness (limits not binding against limits off), bulk
(rows/s of the batch handoff against bulk_create and the COPY floor), metrics (a /metrics scrape
at 10 and at 1,000,000 jobs), singleflight (1,000 identical jobs: requests at the target,
time to drain), read (GET /jobs/{id} with the read cache against without it, and the ?wait=
wake-up latency), admin (list pages and filters at a million jobs against ten thousand), budget
(what one job costs, counted: statements, row versions, index entries, WAL, Redis commands, broker
messages, beside a bare Celery task's Redis commands), peak (the seed's peak through the API: 28
jobs/s against a 20 s target, six workers), capacity (fetches in flight one worker process holds
at a 10 s target), scaling (a day of the seed's load through the worker autoscaling rule, with one
worker's measured capacity), browser (a page a script fills, rendered at 1, 2 and 4 pages per
process, against a plain fetch of it), revalidate (1,000 unchanged pages re-fetched plain and with
``revalidate``: bytes received, target CPU, service CPU per job), hostile (log masking of one
long word, against the quadratic pattern it replaced), crawl (5,000 pages of a generated site at 100
fetches at once, against Scrapy's CrawlSpider), each ``bench/<name>.py:run()``.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

ORDER = (
    "intake",
    "e2e",
    "budget",
    "writer",
    "politeness",
    "bulk",
    "metrics",
    "singleflight",
    "read",
    "admin",
    "peak",
    "capacity",
    "scaling",
    "browser",
    "revalidate",
    "hostile",
    "crawl",
)


def available() -> list[str]:
    here = Path(__file__).resolve().parent
    return [name for name in ORDER if (here / f"{name}.py").exists()]


def main(argv: list[str]) -> int:
    names = available()
    chosen = argv or names
    unknown = [n for n in chosen if n not in names]
    if unknown:
        print(f"unknown benchmark {', '.join(unknown)}; one of: {', '.join(names)}", file=sys.stderr)
        return 2
    for name in chosen:
        started = time.monotonic()
        print(f"# {name}", flush=True)
        importlib.import_module(f"bench.{name}").run()
        print(f"# {name} took {time.monotonic() - started:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
