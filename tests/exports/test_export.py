"""Analytics exports: finished jobs and their attempts as zstd Parquet parts
plus a manifest written last, read back with pyarrow and DuckDB, row by row against the ledger."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.files.storage import FileSystemStorage, Storage
from django.core.management import CommandError, call_command
from django.db.models import F
from django.test import override_settings

from apps.exports.export import export_daily, export_prefix, export_window
from apps.exports.tasks import export_daily_task
from apps.jobs.models import Attempt, Job
from scrapejobs.celery import _beat_schedule
from tests.query import helpers
from tests.results.test_storage import s3_results  # noqa: F401 - the moto S3 fixture
from tests.support.big_ledger import ledger_build
from tests.support.procs import ROOT, service_env
from tests.support.session_locks import lock_held_elsewhere

pytestmark = pytest.mark.django_db

SINCE = datetime(2026, 11, 20, tzinfo=UTC)
UNTIL = datetime(2026, 11, 21, tzinfo=UTC)


def _storages(location: Path, backend: str = "django.core.files.storage.FileSystemStorage") -> dict:
    results = {"BACKEND": backend, "OPTIONS": {"location": str(location), "allow_overwrite": True}}
    return {
        "default": results,
        "results": results,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture
def local_results(tmp_path):
    with override_settings(STORAGES=_storages(tmp_path)):
        yield tmp_path


class SaveFailsAfter(Storage):
    """Local files behind a remote-like storage (each part is one ``save``, as on S3) that dies
    on its fifth save: an export that stops halfway, after some parts are written."""

    saves = 0

    def __init__(self, **options: Any):
        self.inner = FileSystemStorage(**options)

    def _save(self, name: str, content: Any) -> str:
        SaveFailsAfter.saves += 1
        if SaveFailsAfter.saves >= 5:
            raise OSError("the storage went away")
        return self.inner.save(name, content)

    def exists(self, name: str) -> bool:
        return self.inner.exists(name)

    def delete(self, name: str) -> None:
        self.inner.delete(name)

    def listdir(self, path: str) -> tuple[list[str], list[str]]:
        return self.inner.listdir(path)


def _finish_at(job: Job, when: datetime) -> Job:
    """Move a finished job (and its attempts) into the past: the export window is a past day."""
    assert job.finished_at is not None and job.started_at is not None
    shift = when - job.finished_at
    Job.objects.filter(id=job.id).update(
        created_at=job.created_at + shift, started_at=job.started_at + shift, finished_at=when
    )
    Attempt.objects.filter(job_id=job.id).update(
        started_at=F("started_at") + shift, finished_at=F("finished_at") + shift
    )
    return Job.objects.get(id=job.id)


def _ledger(tenant, *, inside: int) -> list[Job]:
    """``inside`` final jobs of every kind finished inside the window (some on its first instant),
    and jobs that must stay out: finished on the window's end, before it, still running, queued."""
    kinds = [
        lambda i: helpers.succeeded(tenant, key=f"results/k{i}", url=f"http://a.example/é?q={i}"),
        lambda i: helpers.failed(tenant, url=f"http://a.example/missing/{i}"),
        lambda i: helpers.finish(helpers.running(tenant), outcome="cancelled", error_class="cancelled"),
    ]
    jobs = []
    for i in range(inside):
        job = kinds[i % len(kinds)](i)
        jobs.append(_finish_at(job, SINCE if i == 0 else SINCE + timedelta(minutes=7 * i, microseconds=i)))
    _finish_at(helpers.succeeded(tenant), UNTIL)
    _finish_at(helpers.failed(tenant), SINCE - timedelta(microseconds=1))
    helpers.running(tenant)
    helpers.queued(tenant)
    return jobs


def _expected_jobs() -> list[tuple]:
    """The ledger's view of the window, through the ORM (not the export's own SQL)."""
    rows = []
    jobs = Job.objects.filter(
        status__in=["succeeded", "failed", "cancelled"], finished_at__gte=SINCE, finished_at__lt=UNTIL
    ).order_by("finished_at", "id")
    for j in jobs:
        err = j.last_error or {}
        rows.append(
            (
                str(j.id), str(j.tenant_id), j.method, j.url, j.domain, j.priority, j.status, j.attempts,
                j.max_attempts, j.created_at, j.started_at, j.finished_at, err.get("class"),
                err.get("message"), err.get("http_status"), j.result_key, j.result_size, j.result_sha256,
                j.result_content_type, j.result_http_status, j.result_stored_at, j.result_deleted_at,
            )
        )  # fmt: skip
    return rows


def _expected_attempts(job_ids: list[str]) -> list[tuple]:
    return [
        (str(a.job_id), a.number, a.worker, a.started_at, a.finished_at, a.outcome, a.http_status,
         a.error_class, a.error, a.duration_ms)
        for a in Attempt.objects.filter(job_id__in=job_ids).order_by("job_id", "number")
    ]  # fmt: skip


def _manifest(root: Path) -> dict:
    return json.loads((root / export_prefix(since=SINCE, until=UNTIL) / "manifest.json").read_text())


def _files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".spool" not in p.parts}


def test_an_export_reads_back_in_pyarrow_and_duckdb_row_by_row_as_the_ledger_has_it(
    local_results, make_tenant
):
    tenant, _, _ = make_tenant()
    _ledger(tenant, inside=20)
    call_command(
        "export_jobs", "--since", "2026-11-20", "--until", "2026-11-21T00:00:00Z", "--part-rows", "6"
    )

    manifest = _manifest(local_results)
    expected_jobs = _expected_jobs()
    expected_attempts = _expected_attempts([row[0] for row in expected_jobs])
    assert len(expected_jobs) == 20 and len(expected_attempts) == 20
    assert manifest["window"] == {
        "since": "2026-11-20T00:00:00Z",
        "until": "2026-11-21T00:00:00Z",
        "column": "finished_at",
    }
    assert manifest["tables"]["jobs"]["rows"] == 20 and manifest["tables"]["attempts"]["rows"] == 20
    job_parts = [local_results / p["key"] for p in manifest["tables"]["jobs"]["parts"]]
    attempt_parts = [local_results / p["key"] for p in manifest["tables"]["attempts"]["parts"]]
    assert [p["rows"] for p in manifest["tables"]["jobs"]["parts"]] == [6, 6, 6, 2]
    for part in job_parts + attempt_parts:
        assert pq.ParquetFile(part).metadata.row_group(0).column(0).compression == "ZSTD"

    # pyarrow, part by part in the manifest's order: the ledger's rows in (finished_at, id) order.
    read_jobs = [tuple(r.values()) for p in job_parts for r in pq.read_table(p).to_pylist()]
    read_attempts = [tuple(r.values()) for p in attempt_parts for r in pq.read_table(p).to_pylist()]
    assert read_jobs == expected_jobs
    assert sorted(read_attempts) == sorted(expected_attempts)

    # DuckDB over the same files.
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    files = [str(p) for p in job_parts]
    duck_jobs = con.execute(f"SELECT * FROM read_parquet({files!r}) ORDER BY finished_at, id").fetchall()
    assert duck_jobs == expected_jobs
    duck_attempts = con.execute(
        f"SELECT * FROM read_parquet({[str(p) for p in attempt_parts]!r}) ORDER BY job_id, number"
    ).fetchall()
    assert duck_attempts == sorted(expected_attempts)


def test_an_export_that_dies_halfway_leaves_no_manifest_and_the_next_run_redoes_it_cleanly(
    tmp_path, make_tenant
):
    tenant, _, _ = make_tenant()
    _ledger(tenant, inside=10)
    SaveFailsAfter.saves = 0
    with (
        override_settings(STORAGES=_storages(tmp_path, f"{__name__}.SaveFailsAfter")),
        pytest.raises(OSError),
    ):
        export_window(since=SINCE, until=UNTIL, part_rows=2)
    prefix = export_prefix(since=SINCE, until=UNTIL)
    # Four saves made it (two parts of each table), the fifth died: parts, no manifest.
    assert _files_under(tmp_path) == {
        f"{prefix}/{table}/part-0000{n}.parquet" for table in ("jobs", "attempts") for n in (0, 1)
    }

    with override_settings(STORAGES=_storages(tmp_path)):
        outcome = export_window(since=SINCE, until=UNTIL, part_rows=10)
    assert outcome.written and (outcome.jobs, outcome.attempts, outcome.parts) == (10, 10, 1)
    manifest = _manifest(tmp_path)
    listed = {p["key"] for t in manifest["tables"].values() for p in t["parts"]}
    # Only this run's parts and the manifest: the dead run's leftovers are gone, not mixed in.
    assert _files_under(tmp_path) == listed | {f"{prefix}/manifest.json"}
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    rows = con.execute(
        f"SELECT * FROM read_parquet('{tmp_path}/{prefix}/jobs/*.parquet') ORDER BY finished_at, id"
    )
    assert rows.fetchall() == _expected_jobs()


def test_a_window_with_its_manifest_is_never_written_again(local_results, make_tenant):
    tenant, _, _ = make_tenant()
    _ledger(tenant, inside=3)
    assert export_window(since=SINCE, until=UNTIL).written
    before = {p: p.stat().st_mtime_ns for p in local_results.rglob("*.parquet")}
    _finish_at(helpers.succeeded(tenant), SINCE + timedelta(hours=1))
    # time is the subject: a rewrite now would show as a later mtime
    time.sleep(0.01)
    again = export_window(since=SINCE, until=UNTIL)
    assert not again.written
    assert {p: p.stat().st_mtime_ns for p in local_results.rglob("*.parquet")} == before
    assert _manifest(local_results)["tables"]["jobs"]["rows"] == 3


def test_an_empty_window_still_has_a_manifest_and_one_empty_part_per_table(local_results, db):
    outcome = export_window(since=SINCE, until=UNTIL)
    manifest = _manifest(local_results)
    assert (outcome.jobs, outcome.parts) == (0, 1)
    for table in ("jobs", "attempts"):
        (part,) = manifest["tables"][table]["parts"]
        assert part["rows"] == 0 and pq.read_table(local_results / part["key"]).num_rows == 0


def test_the_daily_task_exports_each_missing_day_once_its_day_has_settled(local_results, make_tenant):
    tenant, _, _ = make_tenant()
    _finish_at(helpers.succeeded(tenant), datetime(2026, 11, 21, 23, 59, tzinfo=UTC))
    # 00:30 on the 22nd: the 21st ended less than the settle time ago; the 19th and 20th are due.
    early = export_daily(now=datetime(2026, 11, 22, 0, 30, tzinfo=UTC))
    assert [o.prefix for o in early] == [
        "exports/20261119T000000Z_20261120T000000Z",
        "exports/20261120T000000Z_20261121T000000Z",
    ]
    later = export_daily(now=datetime(2026, 11, 22, 1, 30, tzinfo=UTC))
    assert [(o.prefix, o.written, o.jobs) for o in later] == [
        ("exports/20261120T000000Z_20261121T000000Z", False, 0),
        ("exports/20261121T000000Z_20261122T000000Z", True, 1),
    ]
    # The beat task itself runs the same service for the current day (its two days exported now).
    assert all(o["written"] for o in export_daily_task())
    assert _beat_schedule()["exports-daily"]["task"] == export_daily_task.name


def test_the_export_prefix_and_part_size_come_from_settings(local_results, make_tenant):
    tenant, _, _ = make_tenant()
    _ledger(tenant, inside=5)
    with override_settings(SCRAPEJOBS_EXPORT_PREFIX="analytics/sj", SCRAPEJOBS_EXPORT_PART_ROWS=2):
        outcome = export_window(since=SINCE, until=UNTIL)
    assert outcome.prefix == "analytics/sj/20261120T000000Z_20261121T000000Z" and outcome.parts == 3
    assert (local_results / outcome.prefix / "manifest.json").is_file()


@pytest.mark.parametrize(
    "args",
    [
        ["--since", "2026-11-21", "--until", "2026-11-20"],
        ["--since", "2026-11-20", "--until", "2026-11-20"],
        ["--since", "yesterday", "--until", "2026-11-20"],
        ["--since", "2026-11-20", "--until", "2026-11-21", "--part-rows", "0"],
    ],
)
def test_a_bad_window_is_refused_and_writes_nothing(local_results, db, args):
    with pytest.raises(CommandError):
        call_command("export_jobs", *args)
    assert _files_under(local_results) == set()


def test_an_export_to_s3_reads_back_row_by_row_and_lists_exactly_its_parts(request, make_tenant):
    client, bucket = request.getfixturevalue("s3_results")  # moto in server mode, over HTTP
    tenant, _, _ = make_tenant()
    _ledger(tenant, inside=7)
    prefix = export_prefix(since=SINCE, until=UNTIL)
    client.put_object(Bucket=bucket, Key=f"{prefix}/jobs/part-00009.parquet", Body=b"left by a dead run")
    outcome = export_window(since=SINCE, until=UNTIL, part_rows=3)
    assert outcome.written and outcome.parts == 3

    manifest = json.loads(client.get_object(Bucket=bucket, Key=outcome.manifest_key)["Body"].read())
    listed = [p["key"] for t in manifest["tables"].values() for p in t["parts"]]
    stored = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
    assert sorted(stored) == sorted([*listed, outcome.manifest_key])

    def read(key: str) -> list[tuple]:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        return [tuple(r.values()) for r in pq.read_table(pa.BufferReader(body)).to_pylist()]

    jobs = [row for p in manifest["tables"]["jobs"]["parts"] for row in read(p["key"])]
    attempts = [row for p in manifest["tables"]["attempts"]["parts"] for row in read(p["key"])]
    assert jobs == _expected_jobs()
    assert sorted(attempts) == sorted(_expected_attempts([row[0] for row in jobs]))


@pytest.mark.e2e
def test_an_export_process_killed_halfway_leaves_no_manifest_and_a_rerun_completes_it(
    transactional_db, tmp_path
):
    built = ledger_build(jobs=20_000, attempts_per_job=2, tenants=2, domains=10)
    now = datetime.now(tz=UTC)
    since, until = now - timedelta(days=8), now + timedelta(days=1)
    prefix = export_prefix(since=since, until=until)
    argv = [
        sys.executable,
        "manage.py",
        "export_jobs",
        "--since",
        since.isoformat(),
        "--until",
        until.isoformat(),
    ]
    env = service_env(SCRAPEJOBS_STORAGE="local", SCRAPEJOBS_RESULTS_DIR=str(tmp_path))
    proc = subprocess.Popen([*argv, "--part-rows", "100"], cwd=ROOT, env=env)
    third_part = tmp_path / prefix / "attempts" / "part-00002.parquet"
    deadline = time.monotonic() + 120
    while not third_part.exists() and proc.poll() is None and time.monotonic() < deadline:
        # time is the subject: polled every 2 ms, so that the kill lands while the export is writing
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL  # killed halfway, not finished
    assert third_part.exists() and not (tmp_path / prefix / "manifest.json").exists()

    rerun = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    manifest = json.loads((tmp_path / prefix / "manifest.json").read_text())
    final = Job.objects.filter(status__in=["succeeded", "failed", "cancelled"], finished_at__gte=since)
    assert manifest["tables"]["jobs"]["rows"] == final.count() > built.jobs // 2
    assert manifest["tables"]["attempts"]["rows"] == Attempt.objects.filter(job__in=final).count()
    listed = {p["key"] for t in manifest["tables"].values() for p in t["parts"]}
    assert _files_under(tmp_path) == listed | {f"{prefix}/manifest.json"}
    con = duckdb.connect()
    ids = con.execute(f"SELECT id FROM read_parquet('{tmp_path}/{prefix}/jobs/*.parquet')").fetchall()
    assert sorted(i for (i,) in ids) == sorted(str(i) for i in final.values_list("id", flat=True))


def test_a_window_another_process_is_exporting_is_refused_by_the_command_and_skipped_by_the_daily_task(
    local_results, make_tenant
):
    tenant, _, _ = make_tenant()
    _ledger(tenant, inside=2)
    with lock_held_elsewhere(f"scrapejobs.export:{export_prefix(since=SINCE, until=UNTIL)}"):
        with pytest.raises(CommandError, match="another process is exporting"):
            call_command("export_jobs", "--since", "2026-11-20", "--until", "2026-11-21")
        assert _files_under(local_results) == set()
        daily = export_daily(now=datetime(2026, 11, 22, 2, 0, tzinfo=UTC))
        assert [o.prefix for o in daily] == ["exports/20261121T000000Z_20261122T000000Z"]
    assert export_window(since=SINCE, until=UNTIL).jobs == 2
