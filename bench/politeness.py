"""Politeness benchmark: what the per-domain machinery costs when it does not bind, and
what a domain shedding 1 % of its load loses to the adaptive rate. One run each, measured in the
same run as its baseline, through the whole service (writer, beat, one worker of
``BENCH_POLITENESS_CONCURRENCY`` threads) on a throwaway database against a local target.

1. ``politeness_not_binding``: ``BENCH_POLITENESS_JOBS`` jobs with everything off (no policy, the
   defaults unlimited, adaptation and robots.txt off) next to the same jobs with a policy for the
   target's domain far above what the run reaches, the adaptive rate on (every answer recorded)
   and robots.txt obeyed (the target answers 404: allow all, fetched once). Aim: ratio >= 0.95.
2. ``politeness_shed_1pct``: a policy of ``BENCH_POLITENESS_SHED_RPS`` (200) requests/s, the
   target answering 503 to one request in a hundred (each retried): jobs/s with the adaptive rate
   on next to off. The issue asks for a loss under 10 %: ratio > 0.9. The policy must bind for this to mean anything: set the rate
   below what the machine reaches with limits off (``politeness_not_binding_off_jobs_per_s``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import redis

from bench.common import (
    Proc,
    create_tenant,
    figure,
    note,
    redis_url_db,
    running,
    service_env,
    sql,
    start_target,
    throwaway_database,
    wait_until,
)
from scrapejobs import processes

JOBS = int(os.environ.get("BENCH_POLITENESS_JOBS", "2000"))
CONCURRENCY = int(os.environ.get("BENCH_POLITENESS_CONCURRENCY", "100"))
SHED_JOBS = int(os.environ.get("BENCH_POLITENESS_SHED_JOBS", "2000"))
SHED_RPS = int(os.environ.get("BENCH_POLITENESS_SHED_RPS", "200"))
TIMEOUT_S = 600
OFF = {"SCRAPEJOBS_DOMAIN_ADAPTIVE": "false", "SCRAPEJOBS_ROBOTS_OBEY": "false"}
ON = {"SCRAPEJOBS_DOMAIN_ADAPTIVE": "true", "SCRAPEJOBS_ROBOTS_OBEY": "true"}


def _flush_redis() -> None:
    # This service's state and broker databases only (REDIS_URL and the next one).
    base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    for offset in (0, 1):
        redis.Redis.from_url(redis_url_db(base, offset)).flushdb()


def _ready(proc: Proc) -> bool:
    if proc.p.poll() is not None:
        raise RuntimeError(f"{proc.name} exited:\n{proc.output()[-3000:]}")
    return " ready." in proc.output()


def _jobs_per_s(
    *, urls: list[str], env_overrides: dict[str, str], policy: tuple[float, int, int] | None
) -> float:
    """Submit ``urls`` as jobs and time them from the first submit to the last final job."""
    _flush_redis()
    results = Path(tempfile.mkdtemp(prefix="bench-politeness-"))
    try:
        with throwaway_database("politeness") as db:
            env = service_env(
                db,
                SCRAPEJOBS_WORKER_CONCURRENCY=str(CONCURRENCY),
                SCRAPEJOBS_RESULTS_DIR=str(results),
                **env_overrides,
            )
            tenant_id, _token = create_tenant(env)
            if policy is not None:
                sql(
                    db,
                    "INSERT INTO politeness_domainpolicy (domain, requests_per_second, burst, max_concurrency,"
                    " grouping, obey_robots, egress_proxy, note, updated_at)"
                    " VALUES ('127.0.0.1', %s, %s, %s, 'host', true, '', 'bench', now()) RETURNING id",
                    policy,
                )
            procs = (
                Proc("control", processes.control(), env),
                Proc("beat", processes.beat(schedule_file=str(results / "celerybeat-schedule")), env),
                Proc("worker", processes.worker(concurrency=CONCURRENCY), env),
            )
            with running(*procs) as (writer, _beat, worker):
                wait_until(lambda: _ready(writer) and _ready(worker), 60, "writer and worker")
                started = _submit_all(env=env, tenant_id=tenant_id, urls=urls)
                final = "SELECT count(*) FROM jobs_job WHERE status IN ('succeeded', 'failed', 'cancelled')"
                wait_until(
                    lambda: sql(db, final)[0][0] >= len(urls), TIMEOUT_S, "every job to be final", 0.05
                )
                elapsed = time.time() - started
            succeeded = sql(db, "SELECT count(*) FROM jobs_job WHERE status = 'succeeded'")[0][0]
            if succeeded != len(urls):
                raise RuntimeError(f"{succeeded}/{len(urls)} jobs succeeded")
    finally:
        shutil.rmtree(results, ignore_errors=True)
    return len(urls) / elapsed


def _submit_all(*, env: dict[str, str], tenant_id: str, urls: list[str]) -> float:
    listing = Path(tempfile.mkstemp(prefix="bench-politeness-urls-")[1])
    listing.write_text("\n".join(urls))
    try:
        submit = Proc(
            "submit", [sys.executable, "-m", "bench.politeness", "submit", tenant_id, str(listing)], env
        )
        wait_until(lambda: submit.p.poll() is not None, TIMEOUT_S, "the submissions")
        if submit.p.returncode != 0:
            raise RuntimeError(submit.output())
        started = float(submit.output().split()[0])
        submit.stop()
        return started
    finally:
        listing.unlink(missing_ok=True)


def run() -> None:
    target_proc, target = start_target()
    with running(target_proc):
        plain = [f"{target}/bytes/4096?n={i}" for i in range(JOBS)]
        note(f"politeness: {JOBS} jobs, limits off, then configured far above the run's pace")
        off = _jobs_per_s(urls=plain, env_overrides=OFF, policy=None)
        on = _jobs_per_s(urls=plain, env_overrides=ON, policy=(1_000_000.0, 1_000_000, 1_000_000))
        figure("politeness_not_binding_off_jobs_per_s", off)
        figure("politeness_not_binding_on_jobs_per_s", on)
        figure("politeness_not_binding_ratio", on / off)

        shed = [f"{target}/shed/{i}?every=100" for i in range(SHED_JOBS)]
        note(f"politeness: {SHED_JOBS} jobs at {SHED_RPS}/s, 1 in 100 answered 503, adaptive off then on")
        policy = (float(SHED_RPS), SHED_RPS, 1_000_000)
        fixed = _jobs_per_s(urls=shed, env_overrides=OFF, policy=policy)
        adaptive = _jobs_per_s(urls=shed, env_overrides=ON, policy=policy)
        figure("politeness_shed_1pct_fixed_jobs_per_s", fixed)
        figure("politeness_shed_1pct_adaptive_jobs_per_s", adaptive)
        figure("politeness_shed_1pct_ratio", adaptive / fixed)


def _submit(tenant_id: str, listing: str) -> None:
    """``python -m bench.politeness submit TENANT URLS_FILE`` (run by ``run()`` with the env)."""
    import uuid

    import django

    django.setup()
    from apps.jobs.intake import job_create

    tenant = uuid.UUID(tenant_id)
    urls = Path(listing).read_text().splitlines()
    started = time.time()
    for url in urls:
        job_create(tenant_id=tenant, url=url, domain="127.0.0.1", max_attempts=10)
    print(started, time.time(), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["submit"]:
        _submit(sys.argv[2], sys.argv[3])
    else:
        run()
