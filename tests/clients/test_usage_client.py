"""The client's and the CLI's usage calls against a real web process (FR-49, docs/usage.md): jobs
run through the jobs services and folded by the rollup, read back over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from scrapejobs_client import AsyncClient, BadRequest, Client

from apps.jobs.receipts import ResultStored
from apps.operators.rollup_runner import rollup_run
from tests.clients.conftest import free_port
from tests.query import helpers
from tests.support.procs import wait_for_web

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def web(services, make_tenant):
    port = free_port()
    proc = services().start("web", port=port, workers=1)
    tenant, token, _ = make_tenant()
    wait_for_web(proc, port)
    stored = ResultStored(
        key="results/u.bin", size=321, sha256="ab" * 32, content_type="text/html", http_status=200
    )
    helpers.finish(helpers.running(tenant), result=stored)
    helpers.failed(tenant)
    assert rollup_run(settle_s=0) == 2
    return f"http://127.0.0.1:{port}", token, tenant


def test_the_client_reads_usage_per_day_sync_and_async(web):
    base, token, _ = web
    today = timezone.now().date()
    with Client(base, token) as sj:
        report = sj.usage(today - timedelta(days=2), today.isoformat())
        assert (report.from_, report.to) == ((today - timedelta(days=2)).isoformat(), today.isoformat())
        assert [d.date for d in report.days][-1] == today.isoformat() and len(report.days) == 3
        day = report.days[-1]
        assert (day.jobs_submitted, day.attempts.succeeded, day.attempts.failed_permanent) == (2, 1, 1)
        assert day.bytes_stored == 321 and report.totals.bytes_stored == 321
        with pytest.raises(BadRequest) as refused:
            sj.usage(today, today - timedelta(days=1))
        assert "to" in json.dumps(
            refused.value.body if hasattr(refused.value, "body") else str(refused.value)
        )

    async def run() -> None:
        async with AsyncClient(base, token) as sj:
            report = await sj.usage(today, today)
            assert report.totals.jobs_submitted == 2 and report.totals.attempts.succeeded == 1

    asyncio.run(run())


def test_the_cli_prints_a_month_of_usage_as_a_table(web):
    base, token, _ = web
    env = {
        **os.environ,
        "SCRAPEJOBS_URL": base,
        "SCRAPEJOBS_TOKEN": token,
        "PYTHONPATH": str(ROOT / "clients" / "python" / "src"),
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "scrapejobs_client.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    today = timezone.now().date()
    shown = cli("usage", "--month", today.strftime("%Y-%m"))
    assert shown.returncode == 0, shown.stderr
    rows = {line.split("│")[1].strip(): line for line in shown.stdout.splitlines() if line.count("│") > 3}
    assert today.strftime("%Y-%m-01") in rows  # every day of the month is a row
    cells = [c.strip() for c in rows[today.isoformat()].split("│")[1:-1]]
    # day, jobs, ok, temp fail, perm fail, cancelled, lost, deferred, bytes stored, rendered, batches, crawls
    assert cells == [today.isoformat(), "2", "1", "0", "1", "0", "0", "0", "321", "0", "0", "0"]
    assert [c.strip() for c in rows["total"].split("│")[1:-1]][:3] == ["total", "2", "1"]

    as_json = cli("--json", "usage", "--from", today.isoformat(), "--to", today.isoformat())
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["totals"]["bytes_stored"] == 321
    assert cli("usage", "--month", "2026-13").returncode == 2
    assert cli("usage", "--from", today.isoformat()).returncode == 2
    refused = cli("usage", "--from", "2024-01-01", "--to", "2026-01-01")  # over 366 days: the API's 400
    assert refused.returncode == 5 and "'to'" in refused.stderr
