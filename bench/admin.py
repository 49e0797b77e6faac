"""The admin at a production's size: every list page and filter of the jobs,
attempts and dead-letter admins, timed through Django's test client as a superuser, first on a
small ledger (the baseline, 10,000 jobs) and then on the full one (1,000,000 jobs and 3,000,000
attempts by default, written with COPY by tests/support/big_ledger.py).

Prints ``admin_<page>_ms`` (median of 5 requests after one warm-up, full ledger), its baseline
``admin_<page>_small_ms``, the ratio of the two, and ``admin_slowest_ms`` against the 300 ms bound.
``BENCH_ADMIN_JOBS`` sets the full ledger's size. Building the million-job ledger takes a few
minutes on a shared two-core machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

from bench.common import ROOT, figure, median, note, service_env, throwaway_database

JOBS = int(os.environ.get("BENCH_ADMIN_JOBS", "1000000"))
SMALL_JOBS = 10_000
ATTEMPTS_PER_JOB = 3
REPEATS = 5
BOUND_MS = 300.0


def _fixed(url: str) -> Callable[[], str]:
    return lambda: url


def run() -> None:
    with throwaway_database("admin") as db:
        note(f"admin: pages on {SMALL_JOBS:,} jobs, then on {JOBS:,} jobs x {ATTEMPTS_PER_JOB} attempts")
        done = subprocess.run(
            [sys.executable, "-m", "bench.admin", "measure"],
            cwd=ROOT,
            env=service_env(db),
            capture_output=True,
            text=True,
        )
        sys.stdout.write(done.stdout)
        if done.returncode != 0:
            raise RuntimeError(f"bench.admin measure failed:\n{done.stderr[-4000:]}")


def _pages() -> dict[str, Callable[[], str]]:
    """Page name -> a function giving its URL on the current ledger (ids are read when called)."""
    from apps.jobs.models import Attempt, AttemptOutcome, Job, JobStatus, Priority
    from apps.tenants.models import Tenant

    def newest_job() -> str:
        return str(Job.objects.order_by("-id").values_list("id", flat=True)[0])

    def a_tenant() -> str:
        return str(Tenant.objects.order_by("name").values_list("id", flat=True)[0])

    def an_attempted_job() -> str:
        return str(Attempt.objects.order_by("-id").values_list("job_id", flat=True)[0])

    jobs, attempts, dead = "/admin/jobs/job/", "/admin/jobs/attempt/", "/admin/scheduling/deadletter/"
    return {
        "jobs_list": lambda: jobs,
        # Every value of the status, priority and outcome filters, common and rare.
        **{f"jobs_status_{s}": _fixed(f"{jobs}?status__exact={s}") for s in JobStatus.values},
        **{f"jobs_priority_{p}": _fixed(f"{jobs}?priority__exact={p}") for p in Priority.values},
        "jobs_tenant": lambda: jobs + f"?tenant__id__exact={a_tenant()}",
        "jobs_domain": lambda: jobs + "?domain=site7.example",
        "jobs_status_and_domain": lambda: jobs + "?status__exact=failed&domain=site7.example",
        "jobs_search_id": lambda: jobs + f"?q={newest_job()}",
        "job_page": lambda: jobs + f"{an_attempted_job()}/change/",
        "attempts_list": lambda: attempts,
        **{f"attempts_outcome_{o}": _fixed(f"{attempts}?outcome__exact={o}") for o in AttemptOutcome.values},
        "attempts_error_class_tls": lambda: attempts + "?error_class=tls_error",
        "attempts_of_a_job": lambda: attempts + f"?q={an_attempted_job()}",
        "dead_letters_grouped": lambda: dead,
        "dead_letters_list": lambda: dead + "?q=",
        "dead_letters_domain": lambda: dead + "?domain=site3.example",
        "dead_letters_tenant": lambda: dead + f"?tenant__id__exact={a_tenant()}",
    }


def _time_pages(client: object) -> dict[str, float]:
    """Median milliseconds per page (after one warm-up request)."""
    timings: dict[str, float] = {}
    for name, url_of in _pages().items():
        url = url_of()
        get = client.get  # type: ignore[attr-defined]
        response = get(url)
        if response.status_code != 200:
            raise RuntimeError(f"{name}: {url} answered {response.status_code}")
        samples = []
        for _ in range(REPEATS):
            t = time.perf_counter()
            get(url)
            samples.append((time.perf_counter() - t) * 1000)
        timings[name] = median(samples)
    return timings


def _measure() -> None:
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client

    from tests.support.big_ledger import ledger_build, ledger_counts

    client = Client()
    client.force_login(User.objects.create_superuser("bench", password="x"))

    ledger_build(jobs=SMALL_JOBS, attempts_per_job=ATTEMPTS_PER_JOB, tenants=10, domains=200, seed=1)
    small = _time_pages(client)

    t = time.perf_counter()
    ledger_build(jobs=JOBS - SMALL_JOBS, attempts_per_job=ATTEMPTS_PER_JOB, tenants=10, domains=200, seed=2)
    note(f"admin: ledger built in {time.perf_counter() - t:.0f}s")
    full = _time_pages(client)

    jobs, attempts = ledger_counts()
    figure("admin_ledger_jobs", jobs)
    figure("admin_ledger_attempts", attempts)
    for name, ms in full.items():
        figure(f"admin_{name}_small_ms", small[name])
        figure(f"admin_{name}_ms", ms)
        figure(f"admin_{name}_to_small_ratio", ms / small[name])
    figure("admin_slowest_ms", max(full.values()))
    figure("admin_pages_over_300ms", sum(ms > BOUND_MS for ms in full.values()))
    figure("admin_loadavg_1m", os.getloadavg()[0])


if __name__ == "__main__" and sys.argv[1:2] == ["measure"]:
    _measure()
elif __name__ == "__main__":
    run()
