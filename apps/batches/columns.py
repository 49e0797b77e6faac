"""Checking a batch a whole column at a time, and turning good rows into part rows.

A Parquet file's columns are checked as they are; the simple rows of a JSON list, JSON lines or
CSV (apps/batches/rows.py) are made into columns first.

POST /jobs's rules checked one row at a time cost about a third of a millisecond a row in Python: a million rows
would take minutes before the 202. Here pyarrow.compute (C++) checks whole columns against the
same rules (``apps/intake/serializers.py``: PLAIN_HTTP_URL and its host, METHODS, PRIORITIES, INT_BOUNDS,
MAX_URL_LENGTH, MAX_HOSTNAME, LOCALHOST: imported, never copied) and builds the part's columns
for the rows that pass. The column pass is narrower than the rules on purpose: it only ever
*accepts*. A row it does not accept (non-ASCII or unusual URLs, headers, a body, an unknown
column, a value of another type) goes through ``row_validate``, the per-row path, which decides
it and gives the exact reasons. So the decisions are POST /jobs's by construction, and
tests/batches/test_columns.py feeds tricky rows to both paths to keep it so.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from apps.batches.parts import PART_SCHEMA
from apps.intake.serializers import (
    INT_BOUNDS,
    LOCALHOST,
    MAX_HOSTNAME,
    MAX_URL_LENGTH,
    METHODS,
    PLAIN_HTTP_URL,
    PLAIN_HTTP_URL_HOST,
    PRIORITIES,
    JobCreateInput,
)
from apps.jobs.ids import uuid7
from apps.jobs.models import Method, Priority, Render

_FIELDS = frozenset(JobCreateInput().fields)
# Version 7 in the high nibble of byte 6, variant 0b10 in the top bits of byte 8 (RFC 9562).
_VERSION_7 = bytes((b & 0x0F) | 0x70 for b in range(256))
_VARIANT = bytes((b & 0x3F) | 0x80 for b in range(256))


@dataclass
class Checked:
    """One chunk of a batch after its check: the good rows as part rows (PART_SCHEMA), the
    rejected ones as (row number, reasons), and how many rows the chunk had."""

    table: pa.Table
    rows: int
    rejected: list[tuple[int, dict[str, list[str]]]] = field(default_factory=list)


def ids_new(count: int) -> pa.Array:
    """``count`` version-7 UUIDs as 16-byte values, made in one piece: the current millisecond
    and 74 random bits each (unique without a counter; rows of one batch share their time)."""
    raw = bytearray(os.urandom(16 * count))
    stamp = (time.time_ns() // 1_000_000 & ((1 << 48) - 1)).to_bytes(6, "big")
    for i, byte in enumerate(stamp):
        raw[i::16] = bytes([byte]) * count
    raw[6::16] = bytes(raw[6::16]).translate(_VERSION_7)
    raw[8::16] = bytes(raw[8::16]).translate(_VARIANT)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), count, [None, pa.py_buffer(bytes(raw))])


def _is_text(column: pa.Array) -> bool:
    return pa.types.is_string(column.type) or pa.types.is_large_string(column.type)


def _false(count: int) -> pa.Array:
    return pa.repeat(pa.scalar(False), count)


def _plain_urls(column: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(mask of the URLs the column pass accepts, their hostnames) for a column of URLs."""
    if not _is_text(column):
        return _false(len(column)), pa.nulls(len(column), pa.string())
    matched = pc.match_substring_regex(column, PLAIN_HTTP_URL)
    host = pc.struct_field(pc.extract_regex(column, PLAIN_HTTP_URL_HOST), [0])
    lowered = pc.utf8_lower(host)
    mask = pc.and_kleene(
        pc.and_kleene(matched, pc.less_equal(pc.utf8_length(column), MAX_URL_LENGTH)),
        pc.and_kleene(
            pc.less_equal(pc.utf8_length(host), MAX_HOSTNAME),
            pc.invert(pc.or_kleene(pc.equal(lowered, LOCALHOST), pc.ends_with(lowered, f".{LOCALHOST}"))),
        ),
    )
    return pc.fill_null(mask, False), lowered


def _absent_or(column: pa.Array, present_ok: pa.Array) -> pa.Array:
    """True where the value is null (the field is absent, its default applies) or acceptable."""
    return pc.or_kleene(pc.is_null(column), pc.fill_null(present_ok, False))


def _choice_ok(column: pa.Array, allowed: frozenset[str]) -> pa.Array:
    if not _is_text(column):
        return pc.is_null(column)
    return _absent_or(column, pc.is_in(column, value_set=pa.array(sorted(allowed))))


def _int_ok(column: pa.Array, low: int, high: int) -> pa.Array:
    if not pa.types.is_integer(column.type):
        return pc.is_null(column)
    return _absent_or(column, pc.and_(pc.greater_equal(column, low), pc.less_equal(column, high)))


def _headers_ok(column: pa.Array) -> pa.Array:
    """Only absent or empty headers pass the column pass; any header is checked row by row."""
    if _is_text(column):
        return _absent_or(column, pc.equal(column, "{}"))
    return pc.is_null(column)


def plain_rows(batch: pa.RecordBatch) -> tuple[pa.Array, pa.Array]:
    """(mask of the rows the column pass accepts, every row's domain): see the module docstring."""
    count = batch.num_rows
    names = batch.schema.names
    if "url" not in names:
        return _false(count), pa.nulls(count, pa.string())
    mask, domain = _plain_urls(batch.column("url"))
    checks: list[pa.Array] = []
    for name in names:
        column = batch.column(name)
        if name == "url":
            continue
        # A rendered row (render, browser) is decided row by row, as a body is; so is a row that
        # asks to revalidate or sets callback_on (FR-33, FR-34: rules across fields).
        if name not in _FIELDS or name in ("body", "render", "browser", "revalidate", "callback_on"):
            checks.append(pc.is_null(column))
        elif name == "method":
            checks.append(_choice_ok(column, METHODS))
        elif name == "priority":
            checks.append(_choice_ok(column, PRIORITIES))
        elif name == "headers":
            checks.append(_headers_ok(column))
        elif name == "callback_url":
            checks.append(_absent_or(column, _plain_urls(column)[0]))
        else:
            checks.append(_int_ok(column, *INT_BOUNDS[name][:2]))
    for check in checks:
        mask = pc.and_(mask, check)
    return mask, domain


def _text_or(batch: pa.RecordBatch, name: str, default: str | None) -> pa.Array:
    """A text column of accepted rows; absent or of another type, the column pass accepted only
    nulls in it, so the field's default applies to every row."""
    column = batch.column(name) if name in batch.schema.names else None
    if column is None or not _is_text(column):
        return pa.repeat(pa.scalar(default, pa.string()), batch.num_rows)
    column = column.cast(pa.string())
    return column if default is None else pc.fill_null(column, default)


def _int_or(batch: pa.RecordBatch, name: str) -> pa.Array:
    """An integer column of accepted rows, defaults filled in (as ``_text_or``)."""
    default = INT_BOUNDS[name][2]
    column = batch.column(name) if name in batch.schema.names else None
    if column is None or not pa.types.is_integer(column.type):
        return pa.repeat(pa.scalar(default, pa.int32()), batch.num_rows)
    return pc.fill_null(column, default).cast(pa.int32())


def plain_table(batch: pa.RecordBatch, domain: pa.Array, numbers: pa.Array) -> pa.Table:
    """Part rows for rows the column pass accepted (``batch`` holds only those), with defaults
    filled in as JobCreateInput fills them; ``numbers`` are their row numbers."""
    count = batch.num_rows
    if count == 0:  # then the batch may lack even a url column of text
        return PART_SCHEMA.empty_table()
    columns = {
        "id": ids_new(count),
        "batch_row": numbers.cast(pa.int32()),
        "url": batch.column("url").cast(pa.string()),
        "domain": domain,
        "method": _text_or(batch, "method", Method.GET),
        "headers": pa.repeat(pa.scalar("{}", pa.string()), count),
        "body": pa.nulls(count, pa.string()),
        "priority": _text_or(batch, "priority", Priority.NORMAL),
        "callback_url": _text_or(batch, "callback_url", None),
        **{name: _int_or(batch, name) for name in INT_BOUNDS},
        "render": pa.repeat(pa.scalar(Render.NONE.value, pa.string()), count),
        "browser_options": pa.nulls(count, pa.string()),
        "revalidate": pa.nulls(count, pa.bool_()),
        "callback_on": pa.nulls(count, pa.string()),
    }
    return pa.Table.from_pydict(columns, schema=PART_SCHEMA)


def rows_table(good: Iterable[tuple[int, dict[str, Any]]]) -> pa.Table:
    """Part rows for rows validated one by one: (row number, validated data with ``domain``)."""
    columns: dict[str, list[Any]] = {name: [] for name in PART_SCHEMA.names}
    for number, data in good:
        columns["id"].append(uuid7().bytes)
        columns["batch_row"].append(number)
        columns["headers"].append(_json_dumps(data["headers"]))
        columns["render"].append(data.get("render", Render.NONE))
        options = data.get("browser_options")
        columns["browser_options"].append(None if options is None else json.dumps(options))
        columns["revalidate"].append(True if data.get("revalidate") else None)
        columns["callback_on"].append(data.get("callback_on"))
        for name in PART_SCHEMA.names[2:]:
            if name not in ("headers", "render", "browser_options", "revalidate", "callback_on"):
                columns[name].append(data[name])
    return pa.Table.from_pydict(columns, schema=PART_SCHEMA)


def _json_dumps(value: dict[str, str]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) if value else "{}"
