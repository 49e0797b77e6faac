"""Batch rows accept ``revalidate`` and ``callback_on`` as POST /jobs does (FR-33, FR-34): in a
JSON list, a CSV file (``true`` / ``false`` cells) and a Parquet file (a boolean column); a row
that did not ask stores nothing more; a bad value is a rejected row with its reason; a part
written before these columns existed still loads."""

from __future__ import annotations

import io
import json
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from apps.batches.loader import batch_load
from apps.batches.parts import PART_SCHEMA, part_table
from apps.jobs.models import Job

pytestmark = pytest.mark.django_db

BATCHES = "/api/v1/batches"
HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture(autouse=True)
def _results_here(local_results):
    """Every test's results on the local filesystem (tests/conftest.py's ``local_results``)."""
    return local_results


def _loaded(api, data: bytes, content_type: str) -> tuple[dict, list[tuple]]:
    r = api.post(BATCHES, data=data, content_type=content_type)
    assert r.status_code == 202, r.content
    receipt = r.json()
    batch_id = uuid.UUID(receipt["id"])
    assert batch_load(batch_id=batch_id) == "loaded"
    jobs = Job.objects.filter(batch_id=batch_id).order_by("batch_row")
    return receipt, list(jobs.values_list("batch_row", "revalidate", "callback_on"))


def test_json_csv_and_parquet_rows_ask_to_revalidate_and_to_be_called_on_change(api):
    rows = [
        {"url": "http://t.example/a", "revalidate": True},
        {"url": "http://t.example/b"},
        {"url": "http://t.example/c", "revalidate": False, "callback_url": HOOK, "callback_on": "change"},
    ]
    want = [(1, True, None), (2, None, None), (3, None, "change")]
    _, got = _loaded(api, json.dumps(rows).encode(), "application/json")
    assert got == want

    csv = (
        "url,revalidate,callback_url,callback_on\n"
        "http://t.example/a,true,,\n"
        "http://t.example/b,,,\n"
        f"http://t.example/c,false,{HOOK},change\n"
    )
    _, got = _loaded(api, csv.encode(), "text/csv")
    assert got == want

    parquet = io.BytesIO()
    names = ("url", "revalidate", "callback_url", "callback_on")  # a null cell is an absent field
    pq.write_table(pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows]), parquet)
    _, got = _loaded(api, parquet.getvalue(), "application/vnd.apache.parquet")
    assert got == want


def test_a_bad_revalidation_value_rejects_its_row_with_the_reason(api):
    rows = [
        {"url": "http://t.example/a", "revalidate": "maybe"},
        {"url": "http://t.example/b", "callback_on": "change"},
        {"url": "http://t.example/c", "revalidate": True},
    ]
    receipt, got = _loaded(api, json.dumps(rows).encode(), "application/json")
    assert receipt["rejected"] == 2
    assert [(r["row"], list(r["errors"])) for r in receipt["rejected_rows"]] == [
        (1, ["revalidate"]),
        (2, ["callback_on"]),
    ]
    assert got == [(3, True, None)]


def test_a_part_written_before_the_refetching_columns_still_loads(tmp_path):
    older = pa.schema(list(PART_SCHEMA)[:-2])
    table = pa.Table.from_pylist(
        [
            {"id": uuid.uuid4().bytes, "batch_row": 1, "url": "http://t.example/a", "domain": "t.example",
             "method": "GET", "headers": "{}", "body": None, "priority": "normal", "callback_url": None,
             "max_attempts": 5, "timeout_s": 30, "max_age_s": 0, "render": "none", "browser_options": None}
        ],
        schema=older,
    )  # fmt: skip
    path = tmp_path / "old.parquet"
    pq.write_table(table, path)
    loaded = part_table(str(path))
    assert loaded.schema.equals(PART_SCHEMA)
    assert loaded.column("revalidate").to_pylist() == [None]
