"""Bulk handoff benchmark: rows/s from a Parquet file in to rows in ``jobs``, next to
the ORM's ``bulk_create`` of the same rows and to the raw floor (COPY into the unlogged
staging table and the merge, nothing else), in one run, with both ratios.

The handoff is the real path: POST /batches (Django's test client into the real view: every row
checked with POST /jobs's rules, Parquet parts written, manifest last) and then the loader
(``batch_load``: lease, part checks, one COPY-and-merge transaction per part). ``bulk_create``
inserts the same rows as Job objects, 5,000 a statement. The floor runs ``jobs_bulk_merge`` on
an Arrow table already in memory, one transaction per 100,000 rows (the default part size), so its ratio
says what intake's validation and the part files cost on top of the database's work. Jobs are
truncated between the three. Rows: BENCH_BULK_ROWS (default 200,000).

Setup as bench/writer.py: a throwaway database ``bench_bulk``, measured in a child process.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import uuid

from bench.common import ROOT, figure, flush_redis, note, service_env, throwaway_database

ROWS = int(os.environ.get("BENCH_BULK_ROWS", "200000"))


def run() -> None:
    flush_redis()
    with throwaway_database("bulk") as db:
        env = service_env(db, SCRAPEJOBS_BATCH_MAX_ROWS=str(max(ROWS, 1_000_000)))
        note(f"bulk: {ROWS} rows through POST /batches and the loader, bulk_create, and the COPY floor")
        done = subprocess.run(
            [sys.executable, "-m", "bench.bulk", "measure"], cwd=ROOT, env=env, capture_output=True, text=True
        )
        sys.stdout.write(done.stdout)
        if done.returncode != 0:
            raise RuntimeError(f"bench.bulk measure failed:\n{done.stderr[-4000:]}")
    flush_redis()


def _rows() -> list[dict[str, str]]:
    return [
        {"url": f"https://shop{i % 500}.example/item/{i}", "priority": ("high", "normal", "low")[i % 3]}
        for i in range(ROWS)
    ]


def _parquet(rows: list[dict[str, str]]) -> bytes:
    import pyarrow as pa  # noqa: PLC0415 - the parent process does not need it
    import pyarrow.parquet as pq  # noqa: PLC0415

    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), out, compression="zstd")
    return out.getvalue()


def _truncate() -> None:
    from django.db import connection  # noqa: PLC0415

    with connection.cursor() as cur:
        cur.execute("TRUNCATE jobs_job CASCADE")


def _handoff(tenant: object, token: str, data: bytes) -> float:
    from django.test import Client  # noqa: PLC0415

    from apps.batches.loader import batch_load  # noqa: PLC0415

    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    started = time.perf_counter()
    r = client.post("/api/v1/batches", data=data, content_type="application/vnd.apache.parquet")
    assert r.status_code == 202, r.content
    intake = time.perf_counter() - started
    assert batch_load(batch_id=uuid.UUID(r.json()["id"])) == "loaded"
    took = time.perf_counter() - started
    figure("bulk_handoff_intake_s", intake, "s")
    figure("bulk_handoff_load_s", took - intake, "s")
    return took


def _bulk_create(tenant_id: uuid.UUID, rows: list[dict[str, str]]) -> float:
    from django.utils import timezone  # noqa: PLC0415

    from apps.jobs.models import Job  # noqa: PLC0415

    started = time.perf_counter()
    now = timezone.now()
    Job.objects.bulk_create(
        (
            Job(
                tenant_id=tenant_id,
                url=r["url"],
                domain=str(r["url"]).split("/")[2],
                priority=r["priority"],
                created_at=now,
            )
            for r in rows
        ),
        batch_size=5000,
    )
    return time.perf_counter() - started


def _floor(tenant_id: uuid.UUID, rows: list[dict[str, str]]) -> float:
    import pyarrow as pa  # noqa: PLC0415
    from django.db import transaction  # noqa: PLC0415

    from apps.batches.parts import PART_SCHEMA  # noqa: PLC0415
    from apps.jobs.bulk import jobs_bulk_merge  # noqa: PLC0415
    from apps.jobs.ids import uuid7  # noqa: PLC0415

    staged = pa.Table.from_pydict(
        {
            "id": [uuid7().bytes for _ in rows],
            "batch_row": list(range(1, len(rows) + 1)),
            "url": [r["url"] for r in rows],
            "domain": [str(r["url"]).split("/")[2] for r in rows],
            "method": ["GET"] * len(rows),
            "headers": ["{}"] * len(rows),
            "body": [None] * len(rows),
            "priority": [r["priority"] for r in rows],
            "callback_url": [None] * len(rows),
            "max_attempts": [5] * len(rows),
            "timeout_s": [30] * len(rows),
            "max_age_s": [0] * len(rows),
            "render": ["none"] * len(rows),
            "browser_options": [None] * len(rows),
            "revalidate": [None] * len(rows),
            "callback_on": [None] * len(rows),
        },
        schema=PART_SCHEMA,
    )
    batch_id = uuid.uuid4()
    started = time.perf_counter()
    for part, first in enumerate(range(0, len(rows), 100_000)):
        with transaction.atomic():
            jobs_bulk_merge(
                tenant_id=tenant_id, batch_id=batch_id, part=part, table=staged.slice(first, 100_000)
            )
    return time.perf_counter() - started


def _measure() -> None:
    import django  # noqa: PLC0415

    django.setup()
    from apps.tenants.services import tenant_create  # noqa: PLC0415

    created = tenant_create(name="bench-bulk")
    rows = _rows()
    data = _parquet(rows)
    figure("bulk_rows", ROWS)
    handoff = _handoff(created.tenant, created.token, data)
    _truncate()
    orm = _bulk_create(created.tenant.id, rows)
    _truncate()
    floor = _floor(created.tenant.id, rows)
    figure("bulk_handoff_rows_per_s", ROWS / handoff, "rows/s")
    figure("bulk_bulk_create_rows_per_s", ROWS / orm, "rows/s")
    figure("bulk_copy_floor_rows_per_s", ROWS / floor, "rows/s")
    figure("bulk_handoff_vs_bulk_create", orm / handoff, "x")
    figure("bulk_handoff_vs_floor", floor / handoff, "x")
    figure("load_average_1m", os.getloadavg()[0])


if __name__ == "__main__" and sys.argv[1:] == ["measure"]:
    _measure()
