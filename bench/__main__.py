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
jobs/s against a 20 s target, and multiples of it up to ``MULTIPLE``), capacity (fetches in flight one worker process holds
at a 10 s target), scaling (a day of the seed's load through the worker autoscaling rule, with one
worker's measured capacity), browser (a page a script fills, rendered at 1, 2 and 4 pages per
process, against a plain fetch of it), browser-soak (2,000 rendered pages through one browser
pool, its and Chromium's memory, descriptors and processes sampled each restart cycle),
revalidate (1,000 unchanged pages re-fetched plain and with ``revalidate``: bytes received,
target CPU, service CPU per job), hostile (log masking of one
long word, against the quadratic pattern it replaced), usage (GET /usage for 31 days and a year at
1,000,000 jobs, from the per-tenant daily rollup), crawl (5,000 pages of a generated site at 100
fetches at once, against Scrapy's CrawlSpider), each ``bench/<name>.py:run()`` (a ``-`` in the name
is a ``_`` in the module's).

Each benchmark's figures are also written to ``bench/results/<name>.json`` with the machine, the
commit and the ``BENCH_*`` settings of the run (``BENCH_RESULTS_DIR`` elsewhere; empty: not
written); ``make figures`` renders README.md's and docs/benchmarks.md's figures from them.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

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
    "browser-soak",
    "revalidate",
    "hostile",
    "usage",
    "crawl",
)


def available() -> list[str]:
    here = Path(__file__).resolve().parent
    return [name for name in ORDER if (here / f"{_module(name)}.py").exists()]


def _module(name: str) -> str:
    return name.replace("-", "_")


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
        load, commit = os.getloadavg(), _commit()  # what ran: taken before it runs
        sink = Path(tempfile.mkstemp(prefix=f"bench-{name}-", suffix=".figures")[1])
        os.environ["BENCH_FIGURES_FILE"] = str(sink)  # this process's and its children's figures
        try:
            importlib.import_module(f"bench.{_module(name)}").run()
            figures = dict(json.loads(line) for line in sink.read_text().splitlines() if line)
        finally:
            del os.environ["BENCH_FIGURES_FILE"]
            sink.unlink(missing_ok=True)
        took = time.monotonic() - started
        print(f"# {name} took {took:.0f}s", flush=True)
        results_write(name, figures=figures, took_s=took, load_at_start=load, commit=commit)
    return 0


def _machine() -> dict[str, object]:
    """What the figures were measured on: cores, memory, CPU model."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kib = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal:")
        )
    except (OSError, StopIteration):
        mem_kib = 0
    return {"cores": os.cpu_count(), "memory_gib": round(mem_kib / 1024 / 1024, 1), "cpu_model": model}


def _commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty.strip() else "")


def results_write(
    name: str,
    *,
    figures: dict[str, object],
    took_s: float,
    load_at_start: tuple[float, float, float],
    commit: str | None = None,
) -> Path | None:
    """``bench/results/<name>.json`` (or ``BENCH_RESULTS_DIR``; empty: nothing written): the run's
    figures, what it ran on and with which ``BENCH_*`` settings. `make figures` renders the
    documents from these files (bench/figures.py)."""
    where = os.environ.get("BENCH_RESULTS_DIR", str(ROOT / "bench" / "results"))
    if not where:
        return None
    out = Path(where) / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "bench": name,
        "command": f"make bench BENCH={name}",
        "settings": {
            k: v
            for k, v in sorted(os.environ.items())
            # Where the run writes is not how big it was: only sizes and switches are its settings.
            if k.startswith("BENCH_")
            and k not in ("BENCH_RESULTS_DIR", "BENCH_FIGURES_FILE")
            and not k.endswith("_PLOT")
        },
        "commit": commit or _commit(),
        "finished_at": datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "took_s": round(took_s),
        "machine": {**_machine(), "load_average_at_start": [round(x, 2) for x in load_at_start]},
        "figures": figures,
    }
    out.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
