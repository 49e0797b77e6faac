"""The Parquet column pass (apps/batches/columns.py) decides every row as POST /jobs's serializer
does: the same tricky rows go through both, and the accepted rows, their stored values and the
rejected rows' reasons must be the same."""

from __future__ import annotations

import json
import time
import uuid

import pyarrow as pa
import pytest
from django.test import override_settings

from apps.batches.columns import ids_new, plain_rows
from apps.batches.parquet_rows import _parquet_checked, _parquet_value
from apps.batches.rows import _messages
from apps.intake.serializers import JobCreateInput, hostname_of

URLS = [
    "http://t.example/a",
    "HTTPS://Shop.Example:8080/p?q=1&r=%20#frag",
    "http://x.example",
    "http://x.example?x=@y",
    "ftp://x.example/",
    "http://x.example/a b",
    "http://x.example/\u00a0",
    "http://x.example/\x7f",
    "http://x.example/\x00",
    "http://x.example/\u2028",
    "http://bücher.de/",
    "http://127.0.0.1/",
    "http://localhost:80/",
    "http://a.LOCALHOST/",
    "http://x.example:99999/",
    "http://x.example:65535/",
    "http://x.example:/",
    "http://" + "a" * 64 + ".com/",
    "http://a..b.com/",
    "http://user:pw@x.example/",
    "http://[::1]/",
    "http://[bad/",
    "http://x.example/" + "a" * 8200,
    "http://" + ("a" * 60 + ".") * 5 + "com/",
    "http:/x.example",
    "",
    "http://_u.example/",
    "http://x.example./",
    "http://0x7f000001/",
    "http://1.2.3.4.example/",
]
OTHERS: list[dict[str, object]] = [
    {},
    {"method": "POST"},
    {"method": "get"},
    {"method": "HEAD", "priority": "high"},
    {"priority": "urgent"},
    {"max_attempts": 0},
    {"max_attempts": 20, "timeout_s": 300, "max_age_s": 2_592_000},
    {"max_attempts": 21},
    {"timeout_s": 301},
    {"max_age_s": -1},
    {"body": "hi"},
    {"body": "hi", "method": "POST"},
    {"body": "", "method": "POST"},
    {"headers": "{}"},
    {"headers": '{"X-A": "1"}'},
    {"headers": '{"Host": "x"}'},
    {"headers": "not json"},
    {"callback_url": "https://cb.example/hook"},
    {"callback_url": "gopher://cb.example/"},
    {"callback_url": "http://localhost/"},
]


def _tables() -> list[pa.Table]:
    """Rows of one type per column in each table (Parquet columns have one type)."""
    fields = {
        "url": pa.string(),
        "method": pa.string(),
        "priority": pa.string(),
        "max_attempts": pa.int64(),
        "timeout_s": pa.int64(),
        "max_age_s": pa.int64(),
        "body": pa.string(),
        "headers": pa.string(),
        "callback_url": pa.string(),
    }
    mixed = [{"url": url} for url in URLS] + [{"url": "http://t.example/o", **other} for other in OTHERS]
    odd_types = [
        pa.table({"url": ["http://t.example/1", "http://t.example/2"], "max_attempts": [1.0, None]}),
        pa.table({"url": ["http://t.example/1", "http://t.example/2"], "timeout_s": [True, None]}),
        pa.table({"url": ["http://t.example/1", "http://t.example/2"], "method": [1, None]}),
        pa.table({"url": ["http://t.example/1", "http://t.example/2"], "colour": ["red", None]}),
        pa.table({"url": [1, 2]}),
        pa.table({"priority": ["low", "high"]}),
        pa.table(
            {
                "url": ["http://t.example/1", "http://t.example/2", "http://t.example/3"],
                "headers": pa.array([[("X-A", "1")], [], None], pa.map_(pa.string(), pa.string())),
            }
        ),
    ]
    return [pa.Table.from_pylist(mixed, schema=pa.schema(fields)), *odd_types]


def _serializer_decisions(table: pa.Table) -> list[tuple[bool, dict]]:
    """What POST /jobs's serializer says of each row: (accepted, validated data or reasons)."""
    decisions: list[tuple[bool, dict]] = []
    for row in table.to_pylist():
        data = {n: _parquet_value(n, v) for n, v in row.items() if v is not None}
        serializer = JobCreateInput(data=data)
        if serializer.is_valid():
            validated = dict(serializer.validated_data)
            decisions.append((True, {**validated, "domain": hostname_of(validated["url"])}))
        else:
            reasons = {str(k): [str(m) for m in _messages(v)] for k, v in serializer.errors.items()}
            decisions.append((False, reasons))
    return decisions


def _stored(part_row: dict) -> dict:
    stored = {
        **{k: v for k, v in part_row.items() if k not in ("id", "batch_row", "headers")},
        "headers": json.loads(part_row["headers"]),
    }
    # A plain row's validated data has no render fields (apps/intake/serializers.py).
    if stored["render"] == "none" and stored["browser_options"] is None:
        del stored["render"], stored["browser_options"]
    # Nor any re-fetching field it did not ask for (FR-33, FR-34).
    for name in ("revalidate", "callback_on"):
        if stored[name] is None:
            del stored[name]
    return stored


@pytest.mark.parametrize("private", [False, True])
def test_the_column_pass_and_the_serializer_decide_every_tricky_row_alike(private):
    with override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=private):
        plain_total = flagged_total = 0
        for table in _tables():
            batch = table.combine_chunks().to_batches()[0]
            want = _serializer_decisions(table)
            plain = plain_rows(batch)[0].to_pylist()
            # The column pass only ever accepts what the serializer accepts.
            assert not [n for n, ok in enumerate(plain, 1) if ok and not want[n - 1][0]]
            plain_total += sum(plain)
            flagged_total += len(plain) - sum(plain)

            checked = _parquet_checked(batch, first=1)
            got_good = {row["batch_row"]: _stored(row) for row in checked.table.to_pylist()}
            want_good = {n: data for n, (ok, data) in enumerate(want, 1) if ok}
            assert got_good == want_good
            assert dict(checked.rejected) == {n: why for n, (ok, why) in enumerate(want, 1) if not ok}
            assert checked.rows == table.num_rows
        # Both paths were taken: plain rows decided by columns alone, the rest row by row.
        assert plain_total >= 15 and flagged_total >= 40


def test_ids_made_in_one_piece_are_distinct_version_7_uuids_of_the_current_millisecond():
    now_ms = time.time_ns() // 1_000_000
    ids = [uuid.UUID(bytes=b) for b in ids_new(50_000).to_pylist()]
    assert len(set(ids)) == 50_000
    assert {(u.version, u.variant) for u in ids} == {(7, uuid.RFC_4122)}
    assert {now_ms <= u.int >> 80 <= now_ms + 1000 for u in ids} == {True}


def _python_rows() -> list[object]:
    """Rows as a JSON list, JSON lines or CSV hand them over: every tricky row above, with the
    headers as JSON gives them, and values of every other type."""
    rows: list[object] = [{"url": url} for url in URLS]
    for other in OTHERS:
        row = {"url": "http://t.example/o", **other}
        if isinstance(row.get("headers"), str):
            try:
                row["headers"] = json.loads(row["headers"])  # type: ignore[arg-type]
            except ValueError:
                pass
        rows.append(row)
    rows += [
        {"url": "http://t.example/1", "max_attempts": 1.0},
        {"url": "http://t.example/2", "timeout_s": True},
        {"url": "http://t.example/3", "max_attempts": "3"},
        {"url": "http://t.example/4", "max_age_s": 1 << 70},
        {"url": "http://t.example/5", "priority": None},
        {"url": "http://t.example/6", "method": 1},
        {"url": "http://t.example/7", "colour": "red"},
        {"url": "http://t.example/\ud800"},
        {"url": ["http://t.example/8"]},
        {"priority": "low"},
        {},
        [],
        "http://t.example/9",
        None,
        {"url": "http://t.example/10", "priority": "low", "max_attempts": 20, "timeout_s": 1, "max_age_s": 0},
    ]
    return rows


@pytest.mark.parametrize("private", [False, True])
def test_rows_read_from_json_or_csv_are_decided_by_the_column_pass_as_one_by_one(private, monkeypatch):
    """A JSON list, JSON lines and CSV rows go through the column pass too (their simple rows):
    the accepted rows, their stored values and the rejected rows' reasons are those of the
    one-by-one path, and the column pass did decide some rows."""
    from apps.batches import rows as rows_module

    numbered = list(enumerate(_python_rows(), start=1))
    with override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=private):
        want = rows_module.validated_one_by_one(numbered)
        one_by_one: list[object] = []
        real = rows_module.row_validate
        monkeypatch.setattr(rows_module, "row_validate", lambda row: one_by_one.append(row) or real(row))
        got = rows_module._checked_rows(numbered)
    assert {r["batch_row"]: _stored(r) for r in got.table.to_pylist()} == {
        r["batch_row"]: _stored(r) for r in want.table.to_pylist()
    }
    assert got.rejected == want.rejected  # the same reasons, in row order
    assert got.rows == want.rows == len(numbered)
    assert len(numbered) - len(one_by_one) >= 10  # decided by columns alone
