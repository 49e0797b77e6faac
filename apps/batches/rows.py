"""Reading a submitted batch file, and checking each row with POST /jobs's rules.

Formats: a JSON list of job objects, JSON lines (one object a line), CSV (a header line with
the job's field names; ``headers`` as a JSON object in its cell; an empty cell is an absent
field) and Parquet (columns named after the fields; ``headers`` a JSON string or a map). Rows
are numbered from 1 in file order (CSV's header line is not a row).

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

import csv
import io
import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from apps.batches.columns import Checked, plain_rows, plain_table, rows_table
from apps.intake.serializers import JobCreateInput, hostname_of, job_create_input_lean

FORMATS = ("json", "jsonl", "csv", "parquet")
# Rows checked together: a chunk's columns and its part rows stay a few MB.
CHUNK_ROWS = 65_536
_INT_FIELDS = ("max_attempts", "timeout_s", "max_age_s")
# Content types that name a format; multipart uploads may name it by the file's extension.
CONTENT_TYPES = {
    "application/json": "json",
    "application/x-ndjson": "jsonl",
    "application/jsonl": "jsonl",
    "application/json-lines": "jsonl",
    "text/csv": "csv",
    "application/vnd.apache.parquet": "parquet",
    "application/x-parquet": "parquet",
}
EXTENSIONS = {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}


class UnreadableFile(Exception):
    """The file as a whole cannot be read in its format (not one bad row: the framing)."""


@dataclass
class RowSource:
    """How many rows a file has (known before any is validated, for the row limit), and its
    rows checked, in chunks, in file order."""

    count: int
    chunks: Iterator[Checked]


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
        return _validated_one_by_one(others)
    try:
        batch = _columns_of(row for _, row in simple)
    except (pa.ArrowException, UnicodeError, OverflowError):  # not expected of checked values
        return _validated_one_by_one(sorted([*simple, *others], key=_row_number))
    plain, domain = plain_rows(batch)
    numbers = pa.array([number for number, _ in simple], pa.int64())
    table = plain_table(batch.filter(plain), domain.filter(plain), numbers.filter(plain))
    left = [simple[i] for i in pc.indices_nonzero(pc.invert(plain)).to_pylist()]
    rest = _validated_one_by_one(sorted([*left, *others], key=_row_number))
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
        if name in _INT_FIELDS:
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
            name: pa.array(
                [row.get(name) for row in rows], pa.int64() if name in _INT_FIELDS else pa.string()
            )
            for name in names
        }
    )


def _validated_one_by_one(numbered: Iterable[tuple[int, Any]]) -> Checked:
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


def _row_chunks(rows: Iterator[Any]) -> Iterator[Checked]:
    first = 1
    while chunk := list(itertools.islice(rows, CHUNK_ROWS)):
        yield _checked_rows(enumerate(chunk, start=first))
        first += len(chunk)


def _json_rows(fh: IO[bytes]) -> RowSource:
    try:
        data = json.load(fh)
    except (ValueError, RecursionError) as e:
        raise UnreadableFile(f"not a JSON document: {e}") from None
    if not isinstance(data, list):
        raise UnreadableFile("a JSON batch is a list of job objects")
    return RowSource(len(data), _row_chunks(iter(data)))


def _jsonl_rows(fh: IO[bytes]) -> RowSource:
    count = sum(1 for line in fh if line.strip())
    fh.seek(0)

    def rows() -> Iterator[Any]:
        for line in fh:
            if line.strip():
                try:
                    yield json.loads(line)
                except (ValueError, RecursionError) as e:
                    yield _Unparsed(f"not a JSON object: {e}")

    return RowSource(count, _row_chunks(rows()))


@dataclass(frozen=True)
class _Unparsed:
    """A row that could not even be parsed; it is rejected with this reason."""

    reason: str


class _TooDeep(Exception):
    """A cell's JSON nests deeper than the decoder's recursion limit (``"[" * 5000``)."""


_TOO_DEEP = "headers: the JSON in this cell is nested too deeply to read"


def _headers_cell(value: str) -> Any:
    """A ``headers`` cell's JSON; text that is not JSON stays a string (refused by the rules)."""
    try:
        return json.loads(value)
    except ValueError:
        return value
    except RecursionError:
        raise _TooDeep() from None


def _csv_cell(name: str, value: str) -> Any:
    """A CSV cell as the JSON value POST /jobs would get: numbers for the integer fields, an object
    for headers; anything that does not convert stays a string and is refused by the rules."""
    if name in _INT_FIELDS and value.strip().lstrip("-").isdigit():
        return int(value)
    if name == "headers":
        return _headers_cell(value)
    return value


def _csv_record(record: dict[str, str]) -> Any:
    try:
        return {k: _csv_cell(k, v) for k, v in record.items() if v != "" and v is not None}
    except _TooDeep:
        return _Unparsed(_TOO_DEEP)


def _csv_rows(fh: IO[bytes]) -> RowSource:
    text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
    try:
        count = sum(1 for _ in csv.reader(text)) - 1
        text.seek(0)
        reader = csv.DictReader(text)
        if not reader.fieldnames:
            raise UnreadableFile("a CSV batch needs a header line naming the fields")
    except (UnicodeDecodeError, csv.Error) as e:
        raise UnreadableFile(f"not a UTF-8 CSV file: {e}") from None

    def rows() -> Iterator[Any]:
        try:
            for record in reader:
                if None in record:  # more cells than the header names
                    yield _Unparsed("more cells than the header line has names")
                    continue
                yield _csv_record(record)
        except (UnicodeDecodeError, csv.Error) as e:
            yield _Unparsed(f"unreadable CSV: {e}")

    return RowSource(max(count, 0), _row_chunks(rows()))


def _parquet_value(name: str, value: Any) -> Any:
    if name == "headers" and isinstance(value, str):
        return _headers_cell(value)
    if name == "headers" and isinstance(value, list):  # a Parquet map reads as (key, value) pairs
        return dict(value)
    return value


def _parquet_rows(fh: IO[bytes]) -> RowSource:
    try:
        parquet = pq.ParquetFile(fh)
        count = parquet.metadata.num_rows
    except (pa.ArrowException, OSError) as e:
        raise UnreadableFile(f"not a Parquet file: {e}") from None

    def chunks() -> Iterator[Checked]:
        batches = parquet.iter_batches(batch_size=CHUNK_ROWS)
        first = 1
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except (pa.ArrowException, OSError) as e:  # a damaged row group past the footer
                raise UnreadableFile(f"the Parquet file is damaged: {e}") from None
            yield _parquet_checked(batch, first=first)
            first += batch.num_rows

    return RowSource(count, chunks())


def _parquet_checked(batch: pa.RecordBatch, *, first: int) -> Checked:
    """The column pass, then the rows it left to the per-row path."""
    plain, domain = plain_rows(batch)
    numbers = pc.add(pc.indices_nonzero(plain), first)
    table = plain_table(batch.filter(plain), domain.filter(plain), numbers)
    others = pc.indices_nonzero(pc.invert(plain))
    if len(others) == 0:
        return Checked(table=table, rows=batch.num_rows)
    rows = (_parquet_record(row) for row in batch.take(others).to_pylist())
    rest = _validated_one_by_one(zip(pc.add(others, first).to_pylist(), rows, strict=True))
    return Checked(table=pa.concat_tables([table, rest.table]), rows=batch.num_rows, rejected=rest.rejected)


def _parquet_record(row: dict[str, Any]) -> Any:
    try:
        return {n: _parquet_value(n, v) for n, v in row.items() if v is not None}
    except _TooDeep:
        return _Unparsed(_TOO_DEEP)


_READERS = {"json": _json_rows, "jsonl": _jsonl_rows, "csv": _csv_rows, "parquet": _parquet_rows}


def rows_open(fh: IO[bytes], *, format: str) -> RowSource:
    return _READERS[format](fh)


def row_validate(row: Any) -> tuple[dict[str, Any] | None, dict[str, list[str]] | None]:
    """(validated data with the job's ``domain``, None) for a good row, (None, {field: [reasons]})
    for a bad one."""
    if isinstance(row, _Unparsed):
        return None, {"non_field_errors": [row.reason]}
    data = job_create_input_lean(row)
    if data is None:
        serializer = JobCreateInput(data=row)
        if serializer.is_valid():
            data = dict(serializer.validated_data)
    if data is not None:
        data["domain"] = hostname_of(data["url"])
        return data, None
    return None, {str(k): [str(m) for m in _messages(v)] for k, v in serializer.errors.items()}


def _messages(detail: Any) -> list[str]:
    if isinstance(detail, dict):
        return [f"{k}: {m}" for k, v in detail.items() for m in _messages(v)]
    if isinstance(detail, list):
        return [m for item in detail for m in _messages(item)]
    return [str(detail)]
