"""``make bench`` runs to the end (NFR-15, docs/benchmarks.md): every benchmark, in one
``python -m bench`` run at the smallest sizes their settings allow, prints its figures and its
"took" line. Three of them had stopped the whole run unnoticed (a column added to a table a
benchmark wrote by hand, a column added to the bulk part's schema, a database read added to the
fetch path); this holds the run, not the figures, which only a full run on a quiet machine says.

On the test servers: each benchmark makes its own throwaway database there, and its Redis
databases are 10 to 12 and 13 to 15 (the two halves), away from the ones the tests use."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from bench.__main__ import available

ROOT = Path(__file__).resolve().parent.parent

SMALL = {
    "BENCH_INTAKE_WARMUP_S": "0.5",
    "BENCH_INTAKE_SECONDS": "1",
    "BENCH_INTAKE_ROUNDS": "1",
    "BENCH_INTAKE_OPEN_RATE": "20",
    "BENCH_E2E_JOBS": "40",
    "BENCH_E2E_ROUNDS": "1",
    "BENCH_E2E_WORKERS": "2",  # four sides' worker processes each start: the run, not the layout
    "BENCH_E2E_LATENCIES_MS": "50",  # one latency, not two: a slow target's figures (Little's law) too
    "BENCH_E2E_HISTORY": "500",  # a ledger with another tenant's jobs: the run's figures count its own
    "BENCH_BUDGET_JOBS": "10",
    "BENCH_BUDGET_PUBLISH_BATCH": "10",
    "BENCH_BUDGET_WRITER_BATCH": "10",
    "BENCH_BUDGET_TRACED": "off",  # tests/test_job_budget.py measures the traced run
    "BENCH_WRITER_RECEIPTS": "200",
    "BENCH_WRITER_BASELINE_RECEIPTS": "50",
    "BENCH_POLITENESS_JOBS": "40",
    "BENCH_POLITENESS_SHED_JOBS": "40",
    "BENCH_POLITENESS_SHED_RPS": "40",
    "BENCH_BULK_ROWS": "500",
    "BENCH_METRICS_JOBS": "500",
    "BENCH_METRICS_ROUNDS": "2",
    "BENCH_SINGLEFLIGHT_JOBS": "20",
    "BENCH_READ_SECONDS": "1",
    "BENCH_READ_WAITERS": "10",
    "BENCH_ADMIN_JOBS": "2000",
    "BENCH_PEAK_RATE": "4",
    "BENCH_PEAK_SECONDS": "5",
    "BENCH_PEAK_TARGET_S": "1",
    "BENCH_CAPACITY_LEVELS": "10",
    "BENCH_CAPACITY_TARGET_S": "1",
    "BENCH_CAPACITY_SECONDS": "3",
    "BENCH_SCALING_MEASURE_JOBS": "20",
    "BENCH_BROWSER_PAGES": "3",
    "BENCH_BROWSER_ITEMS": "10",
    "BENCH_BROWSER_SOAK_PAGES": "20",
    "BENCH_BROWSER_SOAK_PAGES_PER_BROWSER": "5",  # four restart cycles: growth measured after the second
    "BENCH_REVALIDATE_PAGES": "20",
    "BENCH_REVALIDATE_BYTES": "4096",
    "BENCH_USAGE_JOBS": "2000",
    "BENCH_USAGE_TENANTS": "5",
    "BENCH_USAGE_REQUESTS": "5",
    "BENCH_CRAWL_SMALL": "1",
    "BENCH_CRAWL_SCRAPY": "off",  # the Scrapy side installs Scrapy from PyPI: not in a test
}


# A benchmark that measures through another's code and database runs in that one's half (both
# halves at once would drop each other's database).
SAME_HALF_AS = {"scaling": "e2e"}


def _half(name: str, every: list[str]) -> int:
    return every.index(SAME_HALF_AS.get(name, name)) % 2


def _redis_db(url: str, db: int) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


@pytest.mark.e2e
@pytest.mark.timeout(1200)  # a benchmark after another: the run's own bound below, not the suite's 300 s
@pytest.mark.parametrize("half", [0, 1])
def test_make_bench_runs_every_benchmark_to_the_end(tmp_path: Path, half: int) -> None:
    """Every other benchmark, in one ``python -m bench`` run: the two halves run side by side in
    make test's parallel phase, each on its own three Redis databases (10 to 12, 13 to 15); each
    benchmark makes its own database on the server."""
    every = available()
    assert len(every) >= 14
    names = [name for name in every if _half(name, every) == half]
    env = {
        **os.environ,
        **SMALL,
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "REDIS_URL": _redis_db(os.environ["REDIS_URL"], 10 + 3 * half),
        "BENCH_SCALING_PLOT": str(tmp_path / "scaling.png"),
        "BENCH_BROWSER_SOAK_PLOT": str(tmp_path / "browser-soak.png"),
        # Not bench/results/: a smoke run's figures are no figures (docs/benchmarks.md).
        "BENCH_RESULTS_DIR": str(tmp_path / "results"),
    }
    env.pop("CELERY_BROKER_URL", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "-m", "bench", *names],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    for name in names:
        assert re.search(rf"^# {name} took \d+s$", done.stdout, re.M), (
            f"{name} did not finish:\n{out[-4000:]}"
        )
    figures = re.findall(r"^[a-z0-9_]+: \S", done.stdout, re.M)
    assert len(figures) >= 3 * len(names), out[-4000:]
    if "scaling" in names:
        assert (tmp_path / "scaling.png").exists()
    # Each benchmark wrote its figures for `make figures`, saying it ran smaller than its defaults.
    for name in names:
        result = json.loads((tmp_path / "results" / f"{name}.json").read_text())
        assert result["settings"], name
        # The browser benchmarks measure nothing where Chromium is not installed (they say so).
        assert result["figures"] or (name.startswith("browser") and not Path("/usr/bin/chromium").exists()), (
            name
        )
    if "e2e" in names:
        # Every job of the run and no more: the history's 500 of another tenant are not the run's.
        e2e = json.loads((tmp_path / "results" / "e2e.json").read_text())["figures"]
        assert e2e["e2e_50ms_scrapejobs_succeeded"] == 40, e2e
        assert e2e["e2e_50ms_scrapejobs_one_process_succeeded"] == 40, e2e
        # The worker threads of each side were seen blocking: at least once per job (the fetch).
        assert e2e["e2e_50ms_scrapejobs_waits_per_job_worker"] >= 1, e2e
        assert e2e["e2e_50ms_tuned_waits_per_job_tuned_worker"] >= 1, e2e
    if "browser-soak" in names and Path("/usr/bin/chromium").exists():
        assert (tmp_path / "browser-soak.png").exists()
