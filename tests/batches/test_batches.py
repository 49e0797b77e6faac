"""POST /batches and GET /batches/{id} (issue 12 items 1-4): rows checked one by one, parts plus a
manifest in the storage, the loader's lease, its checks and its merge, GET /jobs?batch=."""

from __future__ import annotations

import csv
import io
import json
import uuid
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.test import override_settings
from django.utils import timezone

from apps.batches.loader import batch_lease_take, batch_load
from apps.batches.models import Batch, BatchLease, BatchPart
from apps.batches.parts import PartInfo, manifest_key, manifest_write, part_table
from apps.batches.selectors import batches_to_resume
from apps.batches.services import batches_orphans_remove
from apps.jobs.bulk import jobs_bulk_merge
from apps.jobs.models import Job
from apps.results.storage import results_storage

pytestmark = pytest.mark.django_db

BATCHES = "/api/v1/batches"


@pytest.fixture(autouse=True)
def _results_here(local_results):
    """Every test's results on the local filesystem (tests/conftest.py's ``local_results``)."""
    return local_results


def rows(n: int, start: int = 0) -> list[dict]:
    return [
        {"url": f"http://t.example/{i}", "priority": "low", "max_attempts": 2}
        for i in range(start, start + n)
    ]


def submit(api, body, *, content_type="application/json", **headers):
    data = json.dumps(body) if content_type == "application/json" and not isinstance(body, bytes) else body
    return api.post(BATCHES, data=data, content_type=content_type, **headers)


def accepted(api, body, **kw) -> dict:
    r = submit(api, body, **kw)
    assert r.status_code == 202, r.content
    return r.json()


def test_a_json_batch_loads_its_good_rows_and_reports_the_bad_ones_by_number(api, local_results):
    body = rows(5)
    body[1] = {"url": "ftp://t.example/x"}
    body[3] = {"url": "http://t.example/y", "max_attempts": 99, "colour": "red"}
    receipt = accepted(api, body)
    assert (receipt["status"], receipt["total"], receipt["accepted"], receipt["rejected"]) == (
        "accepted",
        5,
        3,
        2,
    )
    assert [r["row"] for r in receipt["rejected_rows"]] == [2, 4]
    assert set(receipt["rejected_rows"][0]["errors"]) == {"url"}
    assert set(receipt["rejected_rows"][1]["errors"]) == {"colour"}  # unknown fields first, as on POST /jobs
    batch_id = uuid.UUID(receipt["id"])
    assert results_storage().exists(manifest_key(batch_id))
    assert Job.objects.filter(batch_id=batch_id).count() == 0  # nothing before the loader runs

    assert batch_load(batch_id=batch_id) == "loaded"

    state = api.get(f"{BATCHES}/{batch_id}").json()
    assert (state["status"], state["loaded"], state["progress"], state["jobs"]) == (
        "loaded",
        3,
        1.0,
        {"queued": 3},
    )
    jobs = Job.objects.filter(batch_id=batch_id).order_by("batch_row")
    assert [(j.batch_row, j.url, j.priority, j.max_attempts, j.attempt_budget) for j in jobs] == [
        (1, "http://t.example/0", "low", 2, 2),
        (3, "http://t.example/2", "low", 2, 2),
        (5, "http://t.example/4", "low", 2, 2),
    ]
    # Ordinary outbox rows, as POST /jobs makes them.
    assert all(j.status == "queued" and j.published_at is None and j.attempts == 0 for j in jobs)
    assert all(j.domain == "t.example" and j.headers == {} for j in jobs)
    listed = api.get("/api/v1/jobs", {"batch": str(batch_id)}).json()["items"]
    assert sorted(i["url"] for i in listed) == [j.url for j in jobs]


def test_csv_json_lines_parquet_and_a_multipart_upload_give_the_same_jobs(api):
    want = [
        {
            "url": "http://t.example/a",
            "headers": {"X-A": "1"},
            "method": "POST",
            "body": "hi",
            "timeout_s": 7,
        },
        {"url": "http://t.example/b"},
    ]
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=["url", "headers", "method", "body", "timeout_s"])
    writer.writeheader()
    writer.writerow({**want[0], "headers": json.dumps(want[0]["headers"])})
    writer.writerow({"url": want[1]["url"]})
    jsonl = "\n".join(json.dumps(r) for r in want).encode()
    table = pa.Table.from_pylist(
        [{**want[0], "headers": json.dumps(want[0]["headers"])}, {"url": want[1]["url"]}]
    )
    parquet = io.BytesIO()
    pq.write_table(table, parquet)
    sent = [
        accepted(api, text.getvalue().encode(), content_type="text/csv"),
        accepted(api, jsonl, content_type="application/x-ndjson"),
        accepted(api, parquet.getvalue(), content_type="application/vnd.apache.parquet"),
    ]
    upload = io.BytesIO(jsonl)
    upload.name = "jobs.jsonl"
    r = api.post(BATCHES, {"file": upload}, format="multipart")
    assert r.status_code == 202, r.content
    sent.append(r.json())
    for receipt in sent:
        assert (receipt["total"], receipt["rejected"]) == (2, 0), receipt
        batch_id = uuid.UUID(receipt["id"])
        assert batch_load(batch_id=batch_id) == "loaded"
        got = list(
            Job.objects.filter(batch_id=batch_id)
            .order_by("batch_row")
            .values("url", "headers", "method", "body", "timeout_s")
        )
        assert got == [
            {
                "url": "http://t.example/a",
                "headers": {"X-A": "1"},
                "method": "POST",
                "body": "hi",
                "timeout_s": 7,
            },
            {"url": "http://t.example/b", "headers": {}, "method": "GET", "body": None, "timeout_s": 30},
        ]


def test_an_idempotency_key_replays_its_batch_and_refuses_another_file(api):
    first = submit(api, rows(3), HTTP_IDEMPOTENCY_KEY="bulk-1")
    again = submit(api, rows(3), HTTP_IDEMPOTENCY_KEY="bulk-1")
    other = submit(api, rows(4), HTTP_IDEMPOTENCY_KEY="bulk-1")
    assert first.status_code == again.status_code == 202
    assert again.json()["id"] == first.json()["id"] and again["Idempotent-Replayed"] == "true"
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    assert Batch.objects.count() == 1


@override_settings(SCRAPEJOBS_BATCH_MAX_ROWS=3)
def test_a_batch_over_the_row_limit_is_413_and_creates_nothing(api, local_results):
    r = submit(api, rows(4))
    assert r.status_code == 413 and r.json()["code"] == "payload_too_large"
    assert Batch.objects.count() == 0 and not list(local_results.rglob("*.parquet"))
    assert submit(api, rows(3)).status_code == 202


def test_a_batch_over_the_byte_limit_is_413_and_creates_nothing(make_tenant):
    with override_settings(SCRAPEJOBS_BATCH_MAX_BYTES=2048):
        _, _, api = make_tenant()  # the body limit is read when the client's handler starts
        big = submit(api, rows(60))
        small = submit(api, rows(2))
    assert big.status_code == 413 and big.json()["code"] == "payload_too_large"
    # The 413 quotes the batch limit, not POST /jobs's SCRAPEJOBS_MAX_REQUEST_BYTES.
    assert big.json()["detail"] == "The request body is over 2048 bytes (SCRAPEJOBS_BATCH_MAX_BYTES)."
    assert small.status_code == 202
    assert Batch.objects.count() == 1


def test_an_unreadable_file_is_400_and_an_unknown_type_is_415(api):
    assert submit(api, b"[{", content_type="application/json").json()["code"] == "parse_error"
    assert submit(api, b"not parquet", content_type="application/vnd.apache.parquet").status_code == 400
    assert submit(api, b"<x/>", content_type="application/xml").status_code == 415
    assert submit(api, {"url": "http://t.example/"}).status_code == 400  # an object, not a list
    assert Batch.objects.count() == 0


def test_a_parquet_file_damaged_past_its_footer_is_400_and_leaves_nothing_behind(api, local_results):
    # Two row groups: the first reads and is checked, the second's pages are damaged; the footer
    # is intact, so the file opens and its row count is known before the damage shows.
    table = pa.table({"url": [f"http://t.example/{i}" for i in range(4000)]})
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=2000, compression="none")
    data = bytearray(out.getvalue())
    second = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(1).column(0)
    start, size = (
        (second.dictionary_page_offset or second.data_page_offset) + 16,
        second.total_compressed_size // 2,
    )
    data[start : start + size] = b"\xff" * size
    with override_settings(SCRAPEJOBS_BATCH_PART_ROWS=1000):
        r = submit(
            api, bytes(data), content_type="application/vnd.apache.parquet", HTTP_IDEMPOTENCY_KEY="dmg"
        )
    assert r.status_code == 400 and r.json()["code"] == "parse_error", r.content
    assert "damaged" in r.json()["detail"]
    assert Batch.objects.count() == 0 and Job.objects.count() == 0
    assert not [p for p in local_results.rglob("*") if p.is_file()]
    # Nothing was kept of it, so its key is free for a good file.
    assert submit(api, rows(2), HTTP_IDEMPOTENCY_KEY="dmg").status_code == 202


def test_a_batch_without_its_manifest_is_never_loaded(api):
    batch_id = uuid.UUID(accepted(api, rows(3))["id"])
    results_storage().delete(manifest_key(batch_id))
    assert batch_load(batch_id=batch_id) == "failed"
    batch = Batch.objects.get(id=batch_id)
    assert "no manifest" in batch.error and batch.loaded == 0
    assert Job.objects.filter(batch_id=batch_id).count() == 0


def test_parts_left_without_a_manifest_are_ignored_then_removed_after_the_grace(api, local_results):
    batch_id = uuid.UUID(accepted(api, rows(3))["id"])
    results_storage().delete(manifest_key(batch_id))
    Batch.objects.filter(id=batch_id).update(status="receiving")  # intake died before the manifest
    assert batch_load(batch_id=batch_id) == "not_ready"
    assert Job.objects.filter(batch_id=batch_id).count() == 0
    assert batches_orphans_remove() == (0, 0)  # within the grace period nothing is touched
    assert list(local_results.rglob("*.parquet"))
    with override_settings(SCRAPEJOBS_BATCH_ORPHAN_GRACE_S=0.001):
        Batch.objects.filter(id=batch_id).update(updated_at=timezone.now() - timedelta(seconds=1))
        assert batches_orphans_remove() == (1, 1)
    assert not list(local_results.rglob("*.parquet"))
    assert Batch.objects.get(id=batch_id).status == "failed"


@override_settings(SCRAPEJOBS_BATCH_PART_ROWS=2)
def test_a_corrupt_part_fails_the_batch_with_its_reason_and_loads_nothing_of_it(api, local_results):
    batch_id = uuid.UUID(accepted(api, rows(6))["id"])
    parts = sorted(local_results.rglob("part-*.parquet"))
    assert len(parts) == 3
    damaged = bytearray(parts[2].read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    parts[2].write_bytes(bytes(damaged))
    assert batch_load(batch_id=batch_id) == "failed"
    batch = Batch.objects.get(id=batch_id)
    assert batch.status == "failed" and "part 2" in batch.error and "does not match" in batch.error
    assert Job.objects.filter(batch_id=batch_id).count() == 0
    assert not BatchPart.objects.filter(batch_id=batch_id, loaded_at__isnull=False).exists()


@override_settings(SCRAPEJOBS_BATCH_PART_ROWS=2, SCRAPEJOBS_BATCH_REJECTED_SHOWN=1)
def test_parts_hold_the_configured_rows_and_only_the_configured_rejects_are_listed(api):
    body = rows(5) + [{"url": "x"}, {"url": "y"}]
    receipt = accepted(api, body)
    assert receipt["rejected"] == 2 and [r["row"] for r in receipt["rejected_rows"]] == [6]
    batch_load(batch_id=uuid.UUID(receipt["id"]))
    assert list(BatchPart.objects.filter(batch_id=receipt["id"]).values_list("rows", flat=True)) == [2, 2, 1]


def test_a_second_loader_cannot_take_a_held_batch_and_takes_over_an_expired_one(api):
    batch_id = uuid.UUID(accepted(api, rows(3))["id"])
    assert batch_lease_take(batch_id=batch_id, owner="loader-a")
    assert not batch_lease_take(batch_id=batch_id, owner="loader-b")
    assert batch_load(batch_id=batch_id, owner="loader-b") == "held"
    assert batches_to_resume() == []  # a live lease: nobody is sent to it
    assert Job.objects.filter(batch_id=batch_id).count() == 0
    BatchLease.objects.filter(batch_id=batch_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert batches_to_resume() == [batch_id]
    assert batch_load(batch_id=batch_id, owner="loader-b") == "loaded"
    assert Job.objects.filter(batch_id=batch_id).count() == 3
    assert not BatchLease.objects.filter(batch_id=batch_id).exists()  # released when done


def test_merging_a_part_again_inserts_nothing(api, local_results):
    receipt = accepted(api, rows(4))
    batch_id = uuid.UUID(receipt["id"])
    (part,) = local_results.rglob("part-*.parquet")
    table = part_table(str(part))  # read before the load, which removes the part
    batch_load(batch_id=batch_id)
    batch = Batch.objects.get(id=batch_id)
    again = jobs_bulk_merge(tenant_id=batch.tenant_id, batch_id=batch_id, part=0, table=table)
    assert again == 0
    assert Job.objects.filter(batch_id=batch_id).count() == 4
    assert batch_load(batch_id=batch_id) == "loaded"  # a loaded batch is left alone
    assert Batch.objects.get(id=batch_id).loaded == 4


def test_another_tenants_batch_is_404_and_so_is_its_jobs_filter(make_tenant):
    _, _, owner = make_tenant()
    _, _, stranger = make_tenant()
    batch_id = accepted(owner, rows(2))["id"]
    assert stranger.get(f"{BATCHES}/{batch_id}").status_code == 404
    assert stranger.get(f"{BATCHES}/not-a-uuid").status_code == 404
    r = stranger.get("/api/v1/jobs", {"batch": batch_id})
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    assert owner.get("/api/v1/jobs", {"batch": batch_id}).status_code == 200


def test_a_row_whose_unknown_field_name_holds_a_nul_is_rejected_and_the_batch_accepted(api):
    """The reason quotes the name; jsonb holds no U+0000, which once made the batch a 500."""
    receipt = accepted(api, [*rows(1), {"url": "http://t.example/x", "a\u0000b": 1}])
    assert (receipt["total"], receipt["rejected"]) == (2, 1), receipt
    assert receipt["rejected_rows"] == [{"row": 2, "errors": {"a\\u0000b": ["Unknown field."]}}]


@override_settings(SCRAPEJOBS_BATCH_KEY_PREFIX="bulk-in")
def test_parts_and_manifest_live_under_the_configured_prefix(api, local_results):
    batch_id = accepted(api, rows(2))["id"]
    names = sorted(p.name for p in (local_results / "bulk-in" / batch_id).iterdir())
    assert names == ["manifest.json", "part-00000.parquet"]
    assert batch_load(batch_id=uuid.UUID(batch_id)) == "loaded"


@override_settings(SCRAPEJOBS_BATCH_PART_ROWS=2)
def test_a_loaded_batch_leaves_no_part_and_no_manifest_behind(api, local_results):
    """FR-53: the parts hold every row's URL, headers and body; once merged they go."""
    batch_id = accepted(api, rows(5))["id"]
    folder = local_results / "batches" / batch_id
    assert len(list(folder.iterdir())) == 4  # three parts and the manifest
    assert batch_load(batch_id=uuid.UUID(batch_id)) == "loaded"
    assert list(folder.iterdir()) == []
    assert Job.objects.filter(batch_id=batch_id).count() == 5


def test_a_loader_that_died_after_removing_the_parts_is_finished_by_the_next_one(api, local_results):
    batch_id = uuid.UUID(accepted(api, rows(3))["id"])
    assert batch_load(batch_id=batch_id) == "loaded"
    folder = local_results / "batches" / str(batch_id)
    # The state such a loader leaves: every part merged and removed, the manifest still there,
    # the batch still loading.
    Batch.objects.filter(id=batch_id).update(status="loading")
    batch = Batch.objects.get(id=batch_id)
    parts = [
        PartInfo(**{f: getattr(p, f) for f in ("number", "key", "rows", "size", "sha256")})
        for p in batch.parts.all()
    ]
    manifest_write(
        batch_id=batch_id,
        tenant_id=batch.tenant_id,
        parts=parts,
        counts={"total": 3, "rejected": 0, "rejected_rows": []},
    )
    assert [p.name for p in folder.iterdir()] == ["manifest.json"]
    assert batch_load(batch_id=batch_id) == "loaded"
    assert list(folder.iterdir()) == []
    assert Job.objects.filter(batch_id=batch_id).count() == 3


def test_a_deeply_nested_headers_cell_is_a_rejected_row_in_csv_and_parquet(api):
    """``"[" * 5000`` makes json.loads raise RecursionError, not ValueError: the row is rejected
    with its number and reason, the others become jobs (NFR-20)."""
    deep = "[" * 5000
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(["url", "headers"])
    writer.writerow(["http://t.example/1", '{"X-A": "1"}'])
    writer.writerow(["http://t.example/2", deep])
    writer.writerow(["http://t.example/3", ""])
    out = io.BytesIO()
    pq.write_table(
        pa.table(
            {
                "url": ["http://t.example/1", "http://t.example/2", "http://t.example/3"],
                "headers": ['{"X-A": "1"}', deep, None],
            }
        ),
        out,
    )
    for body, content_type in (
        (text.getvalue().encode(), "text/csv"),
        (out.getvalue(), "application/vnd.apache.parquet"),
    ):
        receipt = accepted(api, body, content_type=content_type)
        assert (receipt["total"], receipt["accepted"], receipt["rejected"]) == (3, 2, 1), content_type
        assert receipt["rejected_rows"] == [
            {
                "row": 2,
                "errors": {
                    "non_field_errors": ["headers: the JSON in this cell is nested too deeply to read"]
                },
            }
        ]


def _zigzag_varint(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while True:
        byte, z = z & 0x7F, z >> 7
        if not z:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _parquet_saying(rows: int, *, says: int) -> bytes:
    """A Parquet file of ``rows`` rows whose footer says it has ``says``: the file's num_rows
    (Thrift compact: field 3, an i64, right after the schema) rewritten, the row group's kept."""
    import struct

    out = io.BytesIO()
    pq.write_table(pa.table({"url": [f"http://t.example/{i}" for i in range(rows)]}), out)
    data = out.getvalue()
    length = struct.unpack("<I", data[-8:-4])[0]
    footer = data[-8 - length : -8]
    real = b"\x16" + _zigzag_varint(rows)
    assert footer.count(real) >= 2  # the file's num_rows first, then the row group's (and its column's)
    forged = footer.replace(real, b"\x16" + _zigzag_varint(says), 1)
    data = data[: -8 - length] + forged + struct.pack("<I", len(forged)) + b"PAR1"
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert (meta.num_rows, meta.row_group(0).num_rows) == (says, rows)
    return data


@override_settings(SCRAPEJOBS_BATCH_MAX_ROWS=10)
def test_a_parquet_footer_that_says_fewer_rows_than_it_holds_does_not_pass_the_row_limit(api, local_results):
    r = submit(api, _parquet_saying(300, says=2), content_type="application/vnd.apache.parquet")
    assert r.status_code == 413, r.content
    assert r.json()["detail"] == "The batch has 300 rows; at most 10 per batch."
    assert Batch.objects.count() == 0 and not list(local_results.rglob("*.parquet"))


@override_settings(SCRAPEJOBS_BATCH_MAX_ROWS=3)
def test_a_json_list_past_the_row_limit_is_a_413_as_it_is_read_and_leaves_nothing(api, local_results):
    r = submit(api, b"[" + b",".join([b"{}"] * 100_000) + b"]")
    assert r.status_code == 413, r.content
    assert r.json()["detail"] == "The batch has more than 3 rows; at most 3 per batch."
    assert Batch.objects.count() == 0 and not list(local_results.rglob("*.parquet"))


@override_settings(SCRAPEJOBS_BATCH_MAX_COLUMNS=8)
def test_a_file_with_more_columns_than_the_limit_is_a_413_and_a_json_row_with_more_fields_is_rejected(api):
    names = ["url", *(f"c{i}" for i in range(8))]
    text = io.StringIO()
    csv.writer(text).writerows([names, ["http://t.example/1", *([""] * 8)]])
    out = io.BytesIO()
    pq.write_table(pa.table({n: ["http://t.example/1"] for n in names}), out)
    for body, content_type in (
        (text.getvalue().encode(), "text/csv"),
        (out.getvalue(), "application/vnd.apache.parquet"),
    ):
        r = submit(api, body, content_type=content_type)
        assert r.status_code == 413, (content_type, r.content)
        assert r.json()["detail"] == "The batch has 9 columns; at most 8 per batch."
    assert Batch.objects.count() == 0
    wide = {n: "x" for n in names} | {"url": "http://t.example/2"}
    receipt = accepted(api, [{"url": "http://t.example/1"}, wide])
    assert (receipt["accepted"], receipt["rejected"]) == (1, 1)
    assert receipt["rejected_rows"] == [
        {"row": 2, "errors": {"non_field_errors": ["9 fields; a job has at most 8"]}}
    ]


@pytest.mark.parametrize(
    "body",
    [
        b"[",
        b"[1,]",
        b'[{"url": "http://t.example/"}] x',
        b"[{}" + b" " * (3 << 20) + b"{}]",
        b'["\xff"]',
        b"[[" * 3000,
    ],
)
def test_a_json_list_that_does_not_read_to_its_end_is_400_and_creates_nothing(api, body):
    r = submit(api, body)
    assert r.status_code == 400, r.content
    assert r.json()["code"] == "parse_error"
    assert Batch.objects.count() == 0


def test_a_json_list_read_row_by_row_across_reads_gives_every_row(api, monkeypatch):
    from apps.batches import formats

    monkeypatch.setattr(formats, "JSON_READ_BYTES", 7)  # every value cut across reads
    body = b' \n[ {"url": "http://t.example/1", "max_attempts": 12} ,\n 42, {"url": "http://t.example/\xc3\xa9"} ] \n'
    receipt = accepted(api, body)
    assert (receipt["total"], receipt["accepted"], receipt["rejected"]) == (3, 2, 1)
    assert [r["row"] for r in receipt["rejected_rows"]] == [2]
