"""The ``scrapejobs`` command line against the real service (FR-24, docs/client.md): every
command, its --json, its documented exit codes, and a 1,000-row CSV batch followed to the end
(one Parquet part like 10,000 rows would be: parts are ``SCRAPEJOBS_BATCH_PART_ROWS``, 100,000)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apps.jobs.models import Job
from tests.support.procs import wait_for
from tests.support.target import body_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


def cli_env(stack) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SCRAPEJOBS_URL=stack.base_url,
        SCRAPEJOBS_TOKEN=stack.token,
        PYTHONPATH=str(ROOT / "clients" / "python" / "src"),
        COLUMNS="100",
    )
    return env


def scrapejobs(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scrapejobs_client.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_every_command_answers_with_its_documented_exit_code(stack, target, tmp_path):
    s = stack(worker_concurrency=4)
    env = cli_env(s)

    ok = scrapejobs(
        env, "submit", target.url("/bytes/300"), "--wait", "--priority", "high", "--max-age", "60"
    )
    assert ok.returncode == 0, ok.stderr
    job_id = ok.stdout.split()[0]
    assert "succeeded" in ok.stdout and Job.objects.get(id=job_id).priority == "high"
    assert Job.objects.get(id=job_id).max_age_s == 60

    failed = scrapejobs(env, "--json", "submit", target.url("/status/404"), "--wait", "--max-attempts", "1")
    assert failed.returncode == 1, failed.stderr
    assert json.loads(failed.stdout)["status"] == "failed"

    slow = scrapejobs(env, "submit", target.url("/slow?delay=20"), "--wait", "--timeout", "1")
    assert slow.returncode == 4, slow.stderr
    slow_id = Job.objects.filter(url__contains="/slow").get().id

    cancelled = subprocess.Popen(
        [sys.executable, "-m", "scrapejobs_client.cli", "submit", target.url("/slow?delay=30&n=2"), "--wait"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(
        lambda: Job.objects.filter(url__contains="n=2").exists(), 30, what="the second job to be submitted"
    )
    other = Job.objects.get(url__contains="n=2")
    assert scrapejobs(env, "cancel", str(other.id)).returncode == 0
    assert cancelled.wait(60) == 3, cancelled.stderr.read()
    assert scrapejobs(env, "cancel", str(slow_id)).returncode == 0

    got = scrapejobs(env, "get", job_id, "--json")
    assert got.returncode == 0 and json.loads(got.stdout)["id"] == job_id

    listed = scrapejobs(env, "--json", "ls", "--status", "failed")
    assert listed.returncode == 0
    assert [json.loads(line)["status"] for line in listed.stdout.splitlines()] == ["failed"]

    out = tmp_path / "body.bin"
    downloaded = scrapejobs(env, "result", job_id, "-o", str(out))
    assert downloaded.returncode == 0, downloaded.stderr
    assert out.read_bytes() == body_for(300)
    assert hashlib.sha256(body_for(300)).hexdigest() in downloaded.stdout

    assert scrapejobs(env, "result", str(other.id)).returncode == 5  # 409: not succeeded
    assert scrapejobs(env, "get", "00000000-0000-0000-0000-000000000000").returncode == 5  # 404
    assert scrapejobs(env, "submit", "ftp://example.com/").returncode == 2  # refused before sending
    assert scrapejobs(env, "submit", target.url("/x"), "--priority", "urgent").returncode == 2
    no_token = {k: v for k, v in env.items() if k != "SCRAPEJOBS_TOKEN"}
    assert scrapejobs(no_token, "get", job_id).returncode == 2
    unreachable = scrapejobs(env, "--url", "http://127.0.0.1:9", "--retries", "0", "get", job_id)
    assert unreachable.returncode == 6, unreachable.stderr


@pytest.mark.timeout(600)
def test_a_1000_row_csv_batch_ends_with_every_job_final_and_the_counts_printed(stack, target, tmp_path):
    s = stack(worker_concurrency=50)
    path = tmp_path / "jobs.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["url", "max_attempts"])
        for i in range(1_000):
            w.writerow([target.url(f"/bytes/{16 + i % 64}?row={i}"), 2])

    run = scrapejobs(cli_env(s), "batch", str(path), "--wait", "--timeout", "500", timeout=550)

    assert run.returncode == 0, run.stderr[-2000:]
    assert " 1000 rows" in run.stdout and "rejected 0" in run.stdout
    assert "succeeded 1000  failed 0  cancelled 0" in run.stdout, run.stdout
    assert "final" in run.stderr  # the progress bar
    assert Job.objects.filter(tenant=s.tenant).count() == 1_000
    assert not Job.objects.filter(tenant=s.tenant).exclude(status="succeeded").exists()
