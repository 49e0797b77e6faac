"""Batches through the real processes ("Done when"): the loader runs in the `control`
Celery process (queue `batches`), beat hands a dead loader's batch to another, the worker fetches
loaded jobs from a local target."""

from __future__ import annotations

import io
import statistics
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.db import connection
from django.test import override_settings

from apps.batches.models import Batch, BatchPart
from apps.jobs.models import Job
from tests.support.procs import wait_for

pytestmark = pytest.mark.e2e

FINAL = ("succeeded", "failed", "cancelled")


def _state(api, batch_id: str) -> dict:
    r = api.get(f"/api/v1/batches/{batch_id}")
    assert r.status_code == 200, r.content
    return r.json()


def test_500_json_rows_reach_loaded_and_then_every_job_is_final(services, api, target):
    services().start_all(worker_concurrency=20)
    rows = [{"url": target.url(f"/bytes/{100 + i}"), "max_attempts": 1} for i in range(500)]
    rows[9] = {"url": "mailto:someone@example.com"}
    rows[99] = {"url": target.url("/bytes/5"), "priority": "urgent"}
    r = api.post("/api/v1/batches", rows, format="json")
    assert r.status_code == 202, r.content
    receipt = r.json()
    assert (receipt["total"], receipt["accepted"], receipt["rejected"]) == (500, 498, 2)
    assert [(x["row"], list(x["errors"])) for x in receipt["rejected_rows"]] == [
        (10, ["url"]),
        (100, ["priority"]),
    ]

    wait_for(lambda: _state(api, receipt["id"])["status"] == "loaded", 60, what="the batch to load")
    wait_for(
        lambda: set(_state(api, receipt["id"])["jobs"]) <= set(FINAL),
        120,
        interval=0.5,
        what="every job to end",
    )
    state = _state(api, receipt["id"])
    assert (state["loaded"], state["progress"], state["jobs"]) == (498, 1.0, {"succeeded": 498})
    jobs = Job.objects.filter(batch_id=receipt["id"])
    assert sorted(jobs.values_list("batch_row", flat=True)) == [
        n for n in range(1, 501) if n not in (10, 100)
    ]
    assert all(j.result_size == 100 + j.batch_row - 1 for j in jobs)  # each row fetched its own URL


def _parquet_of(urls: list[str]) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table({"url": urls}), out, compression="zstd")
    return out.getvalue()


def _loaded_parts(batch_id: str) -> int:
    return BatchPart.objects.filter(batch_id=batch_id, loaded_at__isnull=False).count()


# A file at the row maximum it runs under, in ten parts: 200,000 rows here, since a million (the
# default maximum) proved no more and took 40 s longer; `make bench BENCH=bulk` loads at size.
MAX_ROWS, PART_ROWS = 200_000, 20_000


@override_settings(SCRAPEJOBS_BATCH_MAX_ROWS=MAX_ROWS, SCRAPEJOBS_BATCH_PART_ROWS=PART_ROWS)
def test_a_parquet_file_at_the_row_maximum_loads_exactly_once_with_the_loader_killed_mid_load(services, api):
    # No worker: the jobs wait in the outbox; what is checked is that every row is there once.
    service = services(
        SCRAPEJOBS_BATCH_LEASE_S="3",
        SCRAPEJOBS_BATCH_RESUME_INTERVAL_S="1",
        SCRAPEJOBS_BATCH_MAX_ROWS=str(MAX_ROWS),
        SCRAPEJOBS_BATCH_PART_ROWS=str(PART_ROWS),
    )
    loader = service.start("control")
    service.start("beat")
    n = MAX_ROWS
    data = _parquet_of([f"http://shop{i % 1000}.example/item/{i}" for i in range(n)])
    started = time.perf_counter()
    r = api.post("/api/v1/batches", data=data, content_type="application/vnd.apache.parquet")
    answered = time.perf_counter() - started
    assert r.status_code == 202, r.content
    batch_id = r.json()["id"]
    assert (r.json()["accepted"], r.json()["rejected"]) == (n, 0)

    wait_for(lambda: _loaded_parts(batch_id) >= 2, 600, interval=0.05, what="two parts to load")
    loader.kill()  # SIGKILL mid-load: a part's transaction may be open and is rolled back
    parts_at_kill = _loaded_parts(batch_id)
    assert 2 <= parts_at_kill < 10, parts_at_kill
    service.start("control")  # a new loader; beat hands it the batch once the dead one's lease lapses

    wait_for(
        lambda: Batch.objects.get(id=batch_id).status == "loaded", 900, interval=0.5, what="the load to end"
    )
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*), count(DISTINCT batch_row), min(batch_row), max(batch_row) FROM jobs_job"
            " WHERE batch_id = %s",
            [batch_id],
        )
        assert cur.fetchone() == (n, n, 1, n)
    batch = Batch.objects.get(id=batch_id)
    assert (batch.loaded, batch.total, batch.rejected) == (n, n, 0)
    assert _loaded_parts(batch_id) == 10
    print(
        f"\n{n:,}-row batch: 202 in {answered:.1f} s; SIGKILLed the loader after {parts_at_kill} of 10 "
        "parts; loaded exactly once"
    )


@override_settings(SCRAPEJOBS_BATCH_PART_ROWS=10_000)
def test_while_a_big_batch_loads_intake_stays_fast_and_another_tenants_jobs_start_within_seconds(
    services, make_tenant, target
):
    # The broker is kept about a second of the workers' throughput deep (SCRAPEJOBS_DISPATCH_DEPTH,
    # 300 for a worker's 235-330 jobs/s); this test's one worker of 20 threads on a shared machine
    # does a few dozen a second, so its depth is set to match: what is under test is that the
    # batch's 100,000 queued jobs do not delay the other tenant beyond that second or so.
    service = services(SCRAPEJOBS_BATCH_PART_ROWS="10000", SCRAPEJOBS_DISPATCH_DEPTH="40")
    service.start_all(worker_concurrency=20)
    _, _, bulk = make_tenant()
    _, _, single = make_tenant()
    n = 100_000
    data = _parquet_of([target.url(f"/bytes/{i % 50}") for i in range(n)])
    r = bulk.post("/api/v1/batches", data=data, content_type="application/vnd.apache.parquet")
    assert r.status_code == 202, r.content
    batch_id = r.json()["id"]
    wait_for(lambda: _loaded_parts(batch_id) >= 1, 300, interval=0.05, what="the load to start")

    latencies: list[float] = []
    submitted: list[str] = []
    while Batch.objects.get(id=batch_id).status != "loaded" or len(latencies) < 100:
        started = time.perf_counter()
        resp = single.post("/api/v1/jobs", {"url": target.url("/bytes/9")}, format="json")
        latencies.append((time.perf_counter() - started) * 1000)
        assert resp.status_code == 202
        if len(latencies) % 10 == 0:
            submitted.append(resp.json()["id"])
        # time is the subject: single submissions at a steady pace while the batch loads
        time.sleep(0.02)
    loading = _loaded_parts(batch_id)
    p99 = statistics.quantiles(latencies, n=100)[98]

    def started() -> bool:
        return not Job.objects.filter(id__in=submitted, started_at__isnull=True).exists()

    wait_for(started, 60, interval=0.2, what="the other tenant's jobs to start")
    waits = [
        (j.started_at - j.created_at).total_seconds()
        for j in Job.objects.filter(id__in=[uuid.UUID(s) for s in submitted])
    ]
    print(
        f"\nwhile {n} rows loaded ({loading} of 10 parts seen): POST /jobs p50 "
        f"{statistics.median(latencies):.1f} ms, p99 {p99:.1f} ms over {len(latencies)} requests; "
        f"other tenant's jobs started after max {max(waits):.2f} s, median {statistics.median(waits):.2f} s"
    )
    # Intake is not held by the load: no request waited on the merge (a lock wait on a part's
    # merge would hold it for seconds). Its speed, NFR-2's p99 of 200 ms, is a benchmark's to
    # measure (make bench BENCH=peak): on this shared 2-core machine one outlier among ~100
    # requests decides a p99 (352 ms seen on a quiet machine, well under this bound).
    assert max(latencies) < 2000, (p99, max(latencies))
    assert max(waits) < 10
