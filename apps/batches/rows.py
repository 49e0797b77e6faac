"""Checking each row of a submitted batch file with POST /jobs's rules, in chunks; the batch's
limits and the errors that refuse a whole file.

Rows are numbered from 1 in file order (CSV's header line is not a row); the readers of each
format (apps/batches/formats.py, apps/batches/parquet_rows.py) hand them here.

Each row is validated exactly as POST /jobs validates a body: ``job_create_input_lean`` first
(cheap), and for a row it does not accept, the ``JobCreateInput`` serializer, whose errors are
the row's reasons. The rules are imported, never copied. Rows are first checked a whole column at
a time (apps/batches/columns.py): a Parquet file's columns as they are, the simple rows of the
other formats (text and integer values) made into columns; only the rows that pass leaves to
decide are validated one by one.

The rows come out in chunks (``Checked``): the good ones already as part rows, the bad ones with
their numbers and reasons.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from django.conf import settings

from apps.batches.columns import Checked, plain_rows, plain_table, rows_table
from apps.intake.lean import job_create_input_lean
from apps.intake.serializers import JobCreateInput, hostname_of

# Rows checked together: a chunk's columns and its part rows stay a few MB. A chunk of a JSON,
# JSON-lines or CSV file also ends at CHUNK_BYTES of its text, so that its rows in Python stay a
# few tens of MB whatever their shape (NFR-20, docs/limits.md).
CHUNK_ROWS = 65_536
CHUNK_BYTES = 4 << 20
INT_FIELDS = ("max_attempts", "timeout_s", "max_age_s")
# Object fields, written in a CSV cell or a Parquet string as JSON: the headers, a rendered job's
# browser options (FR-30).
JSON_FIELDS = ("headers", "browser")


class UnreadableFile(Exception):
    """The file as a whole cannot be read in its format (not one bad row: the framing)."""


class TooManyRows(Exception):
    def __init__(self, count: int, *, at_least: bool = False):
        limit = settings.SCRAPEJOBS_BATCH_MAX_ROWS
        super().__init__(f"{'more than ' if at_least else ''}{count} rows; at most {limit} per batch")
        self.count = count


class TooManyColumns(Exception):
    def __init__(self, count: int):
        limit = settings.SCRAPEJOBS_BATCH_MAX_COLUMNS
        super().__init__(f"{count} columns; at most {limit} per batch")
        self.count = count


@dataclass
class RowSource:
    """How many rows a file says it has (None for a JSON list, which is only counted as it is
    read), and its rows checked, in chunks, in file order. The row limit holds either way: the
    chunks raise TooManyRows the moment a row past it is read."""

    count: int | None
    chunks: Iterator[Checked]


def row_limit_check(count: int, *, at_least: bool = False) -> None:
    if count > settings.SCRAPEJOBS_BATCH_MAX_ROWS:
        raise TooManyRows(settings.SCRAPEJOBS_BATCH_MAX_ROWS if at_least else count, at_least=at_least)


def column_limit_check(count: int) -> None:
    if count > settings.SCRAPEJOBS_BATCH_MAX_COLUMNS:
        raise TooManyColumns(count)


def _checked_rows(numbered: Iterable[tuple[int, Any]]) -> Checked:
    """Rows read into Python values (a JSON list, JSON lines, CSV): the rows whose every field is
    text (an integer for the integer fields) first go through the column pass a Parquet file gets
    (apps/batches/columns.py, which only ever accepts), as columns of exactly those values; every
    row it leaves, and every other row, is validated one by one. One by one, a row cost a third
    of a millisecond: a million-row CSV kept its POST /batches open for minutes."""
    simple: list[tuple[int, dict[str, Any]]] = []
    others: list[tuple[int, Any]] = []
    for number, row in numbered:
        if _simple(row):
            simple.append((number, row))
        else:
            others.append((number, row))
    if not simple:
        return validated_one_by_one(others)
    try:
        batch = _columns_of(row for _, row in simple)
    except (pa.ArrowException, UnicodeError, OverflowError):  # not expected of checked values
        return validated_one_by_one(sorted([*simple, *others], key=_row_number))
    plain, domain = plain_rows(batch)
    numbers = pa.array([number for number, _ in simple], pa.int64())
    table = plain_table(batch.filter(plain), domain.filter(plain), numbers.filter(plain))
    left = [simple[i] for i in pc.indices_nonzero(pc.invert(plain)).to_pylist()]
    rest = validated_one_by_one(sorted([*left, *others], key=_row_number))
    return Checked(
        table=pa.concat_tables([table, rest.table]), rows=len(simple) + len(others), rejected=rest.rejected
    )


def _row_number(numbered: tuple[int, Any]) -> int:
    return numbered[0]


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _simple(row: Any) -> bool:
    """A JSON object whose values are all ASCII text, integers (not booleans) for the integer
    fields, nothing null (a null is not an absent field to POST /jobs)."""
    if not isinstance(row, dict) or not row:
        return False
    for name, value in row.items():
        if name in INT_FIELDS:
            if type(value) is not int or not _INT64[0] <= value <= _INT64[1]:
                return False
        elif type(value) is not str or not value.isascii() or type(name) is not str:
            return False  # non-ASCII text is decided row by row anyway (and a lone surrogate is no column)
    return True


def _columns_of(rows: Iterable[dict[str, Any]]) -> pa.RecordBatch:
    """The rows as columns: an absent field is a null, which the column pass reads as absent."""
    rows = list(rows)
    names = sorted({name for row in rows for name in row})
    return pa.RecordBatch.from_pydict(
        {
            name: pa.array([row.get(name) for row in rows], pa.int64() if name in INT_FIELDS else pa.string())
            for name in names
        }
    )


def validated_one_by_one(numbered: Iterable[tuple[int, Any]]) -> Checked:
    """Rows validated one by one, each with its row number."""
    good: list[tuple[int, dict[str, Any]]] = []
    rejected: list[tuple[int, dict[str, list[str]]]] = []
    for number, row in numbered:
        data, errors = row_validate(row)
        if data is None:
            rejected.append((number, errors or {}))
        else:
            good.append((number, data))
    return Checked(table=rows_table(good), rows=len(good) + len(rejected), rejected=rejected)


def row_chunks(rows: Iterable[tuple[Any, int]]) -> Iterator[Checked]:
    """(row, its size in the file) pairs checked in chunks of CHUNK_ROWS rows or CHUNK_BYTES of
    text, whichever comes first; a row past SCRAPEJOBS_BATCH_MAX_ROWS raises TooManyRows, and an
    object with more fields than SCRAPEJOBS_BATCH_MAX_COLUMNS is rejected unchecked."""
    columns = settings.SCRAPEJOBS_BATCH_MAX_COLUMNS
    chunk: list[Any] = []
    size = 0
    first = 1
    for row, row_size in rows:
        row_limit_check(first + len(chunk), at_least=True)
        if isinstance(row, dict) and len(row) > columns:
            row = Unparsed(f"{len(row)} fields; a job has at most {columns}")
        chunk.append(row)
        size += row_size
        if len(chunk) >= CHUNK_ROWS or size >= CHUNK_BYTES:
            yield _checked_rows(enumerate(chunk, start=first))
            first += len(chunk)
            chunk, size = [], 0
    if chunk:
        yield _checked_rows(enumerate(chunk, start=first))


@dataclass(frozen=True)
class Unparsed:
    """A row that could not even be parsed; it is rejected with this reason."""

    reason: str


class TooDeep(Exception):
    """A cell's JSON nests deeper than the decoder's recursion limit (``"[" * 5000``)."""

    def __init__(self, field: str):
        super().__init__(field)
        self.reason = f"{field}: the JSON in this cell is nested too deeply to read"


def json_cell(name: str, value: str) -> Any:
    """A JSON cell's value (``headers``, ``browser``); text that is not JSON stays a string
    (refused by the rules)."""
    try:
        return json.loads(value)
    except ValueError:
        return value
    except RecursionError:
        raise TooDeep(name) from None


def row_validate(row: Any) -> tuple[dict[str, Any] | None, dict[str, list[str]] | None]:
    """(validated data with the job's ``domain``, None) for a good row, (None, {field: [reasons]})
    for a bad one."""
    if isinstance(row, Unparsed):
        return None, {"non_field_errors": [_jsonb_text(row.reason)]}
    data = job_create_input_lean(row)
    if data is None:
        serializer = JobCreateInput(data=row)
        if serializer.is_valid():
            data = dict(serializer.validated_data)
    if data is not None:
        data["domain"] = hostname_of(data["url"])
        return data, None
    return None, {
        _jsonb_text(str(k)): [_jsonb_text(m) for m in _messages(v)] for k, v in serializer.errors.items()
    }


def _jsonb_text(text: str) -> str:
    """A reason kept in Batch.rejected_rows (jsonb), which cannot hold U+0000: a reason can quote the
    row's own text (an unknown field's name), and a NUL there made the whole batch a 500."""
    return text.replace("\x00", "\\u0000")


def _messages(detail: Any) -> list[str]:
    if isinstance(detail, dict):
        return [f"{k}: {m}" for k, v in detail.items() for m in _messages(v)]
    if isinstance(detail, list):
        return [m for item in detail for m in _messages(item)]
    return [str(detail)]
