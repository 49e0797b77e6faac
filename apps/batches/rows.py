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

import codecs
import csv
import io
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from django.conf import settings

from apps.batches.columns import Checked, plain_rows, plain_table, rows_table
from apps.intake.serializers import JobCreateInput, hostname_of, job_create_input_lean

FORMATS = ("json", "jsonl", "csv", "parquet")
# Rows checked together: a chunk's columns and its part rows stay a few MB. A chunk of a JSON,
# JSON-lines or CSV file also ends at CHUNK_BYTES of its text, so that its rows in Python stay a
# few tens of MB whatever their shape (NFR-20, docs/limits.md).
CHUNK_ROWS = 65_536
CHUNK_BYTES = 4 << 20
# Parquet is read in record batches of this many rows, whatever its footer says of its sizes (a
# footer is the sender's word: a 434-byte file can say its rows are tiny and hold 8 KiB each), and
# a record batch that decodes to more than PARQUET_BATCH_MAX_BYTES (rows of over 32 KiB on
# average) refuses the file at once (docs/limits.md: what that bounds, and what it cannot).
PARQUET_BATCH_ROWS = 512
PARQUET_BATCH_MAX_BYTES = 16 << 20
# Rows a Parquet chunk hands to the per-row path at once, as Python values.
PARQUET_PYLIST_ROWS = 4096
# Bytes read from a JSON file at a time while it is decoded row by row.
JSON_READ_BYTES = 1 << 20
_INT_FIELDS = ("max_attempts", "timeout_s", "max_age_s")
# Object fields, written in a CSV cell or a Parquet string as JSON: the headers, a rendered job's
# browser options (FR-30).
_JSON_FIELDS = ("headers", "browser")
# Boolean fields, written in a CSV cell as true or false (FR-33).
_BOOL_FIELDS = ("revalidate",)
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


def _row_limit_check(count: int, *, at_least: bool = False) -> None:
    if count > settings.SCRAPEJOBS_BATCH_MAX_ROWS:
        raise TooManyRows(settings.SCRAPEJOBS_BATCH_MAX_ROWS if at_least else count, at_least=at_least)


def _column_limit_check(count: int) -> None:
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


def _row_chunks(rows: Iterable[tuple[Any, int]]) -> Iterator[Checked]:
    """(row, its size in the file) pairs checked in chunks of CHUNK_ROWS rows or CHUNK_BYTES of
    text, whichever comes first; a row past SCRAPEJOBS_BATCH_MAX_ROWS raises TooManyRows, and an
    object with more fields than SCRAPEJOBS_BATCH_MAX_COLUMNS is rejected unchecked."""
    columns = settings.SCRAPEJOBS_BATCH_MAX_COLUMNS
    chunk: list[Any] = []
    size = 0
    first = 1
    for row, row_size in rows:
        _row_limit_check(first + len(chunk), at_least=True)
        if isinstance(row, dict) and len(row) > columns:
            row = _Unparsed(f"{len(row)} fields; a job has at most {columns}")
        chunk.append(row)
        size += row_size
        if len(chunk) >= CHUNK_ROWS or size >= CHUNK_BYTES:
            yield _checked_rows(enumerate(chunk, start=first))
            first += len(chunk)
            chunk, size = [], 0
    if chunk:
        yield _checked_rows(enumerate(chunk, start=first))


_JSON_SPACE = re.compile(r"[ \t\n\r]*")


class _JsonListReader:
    """The rows of a JSON list, decoded one at a time from reads of JSON_READ_BYTES, never the
    whole document: ``json.load`` of a 256 MB ``[{},{},…]`` is 85 million dicts, several GB.
    A row longer than SCRAPEJOBS_MAX_REQUEST_BYTES (POST /jobs's limit for one job) makes the
    file unreadable, so at most about that much text is held besides the rows of a chunk."""

    def __init__(self, fh: IO[bytes]):
        self._fh = fh
        self._utf8 = codecs.getincrementaldecoder("utf-8-sig")()
        self._decoder = json.JSONDecoder()
        self._max_row = settings.SCRAPEJOBS_MAX_REQUEST_BYTES
        self._text = ""
        self._pos = 0
        self._eof = False

    def _more(self) -> bool:
        if self._eof:
            return False
        data = self._fh.read(JSON_READ_BYTES)
        self._eof = not data
        try:
            text = self._utf8.decode(data, final=self._eof)
        except UnicodeDecodeError as e:
            raise UnreadableFile(f"not a UTF-8 JSON document: {e}") from None
        self._text, self._pos = self._text[self._pos :] + text, 0
        return True

    def _next_char(self) -> str:
        """The next character that is not JSON whitespace ("" at the end of the file)."""
        while True:
            self._pos = _JSON_SPACE.match(self._text, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._text):
                return self._text[self._pos]
            if not self._more():
                return ""

    def _value(self, number: int) -> tuple[Any, int]:
        while True:
            try:
                value, end = self._decoder.raw_decode(self._text, self._pos)
            except json.JSONDecodeError as e:
                if self._eof:
                    raise UnreadableFile(f"not a JSON document: {e.msg} (row {number})") from None
                if len(self._text) - self._pos > self._max_row:
                    raise UnreadableFile(f"row {number} is over {self._max_row} bytes") from None
                self._more()
                continue
            except RecursionError:
                raise UnreadableFile(f"not a JSON document: row {number} is nested too deeply") from None
            if end == len(self._text) and self._more():
                continue  # a number at the end of a read may go on in the next one
            size, self._pos = end - self._pos, end
            return value, size

    def rows(self) -> Iterator[tuple[Any, int]]:
        if self._next_char() != "[":
            raise UnreadableFile("a JSON batch is a list of job objects")
        self._pos += 1
        number = 0
        if self._next_char() == "]":
            self._pos += 1
        else:
            while True:
                number += 1
                yield self._value(number)
                after = self._next_char()
                self._pos += 1
                if after == "]":
                    break
                if after != ",":
                    raise UnreadableFile(f"not a JSON document: ',' or ']' expected after row {number}")
                self._next_char()
        if self._next_char() != "":
            raise UnreadableFile("not a JSON document: more after the list")


def _json_rows(fh: IO[bytes]) -> RowSource:
    rows = _JsonListReader(fh).rows()
    first = next(rows, None)  # a file that is not a list is refused before the batch is made
    if first is None:
        return RowSource(0, iter(()))
    return RowSource(None, _row_chunks(_chain_first(first, rows)))


def _chain_first(first: tuple[Any, int], rest: Iterator[tuple[Any, int]]) -> Iterator[tuple[Any, int]]:
    yield first
    yield from rest


def _jsonl_lines(fh: IO[bytes]) -> Iterator[bytes]:
    """The file's lines, each read at most SCRAPEJOBS_MAX_REQUEST_BYTES (POST /jobs's limit for
    one job) long: a longer line makes the file unreadable before it is held whole (a single line
    of 256 MB would be read, then parsed, at once)."""
    limit = settings.SCRAPEJOBS_MAX_REQUEST_BYTES
    while line := fh.readline(limit + 1):
        if len(line) > limit:
            raise UnreadableFile(f"a JSON line over {limit} bytes")
        yield line


def _jsonl_rows(fh: IO[bytes]) -> RowSource:
    count = sum(1 for line in _jsonl_lines(fh) if line.strip())
    _row_limit_check(count)
    fh.seek(0)

    def rows() -> Iterator[tuple[Any, int]]:
        for line in _jsonl_lines(fh):
            if line.strip():
                try:
                    yield json.loads(line), len(line)
                except (ValueError, RecursionError) as e:
                    yield _Unparsed(f"not a JSON object: {e}"), len(line)

    return RowSource(count, _row_chunks(rows()))


@dataclass(frozen=True)
class _Unparsed:
    """A row that could not even be parsed; it is rejected with this reason."""

    reason: str


class _TooDeep(Exception):
    """A cell's JSON nests deeper than the decoder's recursion limit (``"[" * 5000``)."""

    def __init__(self, field: str):
        super().__init__(field)
        self.reason = f"{field}: the JSON in this cell is nested too deeply to read"


def _json_cell(name: str, value: str) -> Any:
    """A JSON cell's value (``headers``, ``browser``); text that is not JSON stays a string
    (refused by the rules)."""
    try:
        return json.loads(value)
    except ValueError:
        return value
    except RecursionError:
        raise _TooDeep(name) from None


def _csv_cell(name: str, value: str) -> Any:
    """A CSV cell as the JSON value POST /jobs would get: numbers for the integer fields, an object
    for headers, true or false for ``revalidate``; anything that does not convert stays a string
    and is refused by the rules."""
    if name in _INT_FIELDS and value.strip().lstrip("-").isdigit():
        return int(value)
    if name in _BOOL_FIELDS and value.strip() in ("true", "false"):
        return value.strip() == "true"
    if name in _JSON_FIELDS:
        return _json_cell(name, value)
    return value


def _csv_record(record: dict[str, str]) -> Any:
    try:
        return {k: _csv_cell(k, v) for k, v in record.items() if v != "" and v is not None}
    except _TooDeep as e:
        return _Unparsed(e.reason)


class _CsvText:
    """A CSV file's lines for csv.reader, each record bounded: a record (its lines, quoted
    newlines included) over SCRAPEJOBS_MAX_REQUEST_BYTES, POST /jobs's limit for one job, makes
    the file unreadable before csv.reader holds it (a single line of 256 MB of commas would be
    a list of 256 million cells)."""

    def __init__(self, text: IO[str]):
        self._text = text
        self._max = settings.SCRAPEJOBS_MAX_REQUEST_BYTES
        self.record_size = 0  # characters given since the caller last reset it (a record's)

    def __iter__(self) -> Iterator[str]:
        while line := self._text.readline(self._max + 1):
            self.record_size += len(line)
            if self.record_size > self._max:
                raise UnreadableFile(f"a CSV record over {self._max} bytes")
            yield line


def _csv_records(text: IO[str]) -> Iterator[tuple[list[str], int]]:
    lines = _CsvText(text)
    for record in csv.reader(lines):
        size, lines.record_size = lines.record_size, 0
        yield record, size


def _csv_rows(fh: IO[bytes]) -> RowSource:
    text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
    try:
        count = sum(1 for _ in _csv_records(text)) - 1
        _row_limit_check(count)
        text.seek(0)
        records = _csv_records(text)
        names = next(records, None)
        if not names or not names[0]:
            raise UnreadableFile("a CSV batch needs a header line naming the fields")
        fieldnames = names[0]
        _column_limit_check(len(fieldnames))
    except (UnicodeDecodeError, csv.Error) as e:
        raise UnreadableFile(f"not a UTF-8 CSV file: {e}") from None

    def rows() -> Iterator[tuple[Any, int]]:
        try:
            for cells, size in records:
                if not cells:
                    continue  # a blank line, as csv.DictReader skips it
                if len(cells) > len(fieldnames):
                    yield _Unparsed("more cells than the header line has names"), size
                    continue
                yield _csv_record(dict(zip(fieldnames, cells, strict=False))), size
        except (UnicodeDecodeError, csv.Error) as e:
            yield _Unparsed(f"unreadable CSV: {e}"), 0

    return RowSource(max(count, 0), _row_chunks(rows()))


def _parquet_value(name: str, value: Any) -> Any:
    if name in _JSON_FIELDS and isinstance(value, str):
        return _json_cell(name, value)
    if name == "headers" and isinstance(value, list):  # a Parquet map reads as (key, value) pairs
        return dict(value)
    return value


def _parquet_rows(fh: IO[bytes]) -> RowSource:
    try:
        parquet = pq.ParquetFile(fh)
        meta = parquet.metadata
        groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
    except (pa.ArrowException, OSError) as e:
        raise UnreadableFile(f"not a Parquet file: {e}") from None
    _column_limit_check(meta.num_columns)
    # The footer's own num_rows is not what the row groups hold (a file may say 2 and hold a
    # million): their sum is the count, and the rows read are counted again as they come.
    count = sum(group.num_rows for group in groups)
    _row_limit_check(count)

    def chunks() -> Iterator[Checked]:
        batches = parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS)
        first = 1
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except (pa.ArrowException, OSError) as e:  # a damaged row group past the footer
                raise UnreadableFile(f"the Parquet file is damaged: {e}") from None
            _row_limit_check(first - 1 + batch.num_rows, at_least=True)
            if batch.nbytes > PARQUET_BATCH_MAX_BYTES:  # known only once decoded: at once, then
                raise UnreadableFile(
                    f"rows {first} to {first + batch.num_rows - 1} decode to {batch.nbytes >> 20} MiB,"
                    f" over {PARQUET_BATCH_MAX_BYTES >> 20} MiB for {PARQUET_BATCH_ROWS} rows"
                )
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
    tables, rejected = [table], []
    # A few thousand rows at a time as Python values: a row of a hundred columns is a dict of a
    # hundred values, and a chunk's worth at once was GBs.
    for start in range(0, len(others), PARQUET_PYLIST_ROWS):
        some = others.slice(start, PARQUET_PYLIST_ROWS)
        rows = (_parquet_record(row) for row in batch.take(some).to_pylist())
        rest = _validated_one_by_one(zip(pc.add(some, first).to_pylist(), rows, strict=True))
        tables.append(rest.table)
        rejected.extend(rest.rejected)
    return Checked(table=pa.concat_tables(tables), rows=batch.num_rows, rejected=rejected)


def _parquet_record(row: dict[str, Any]) -> Any:
    try:
        return {n: _parquet_value(n, v) for n, v in row.items() if v is not None}
    except _TooDeep as e:
        return _Unparsed(e.reason)


_READERS = {"json": _json_rows, "jsonl": _jsonl_rows, "csv": _csv_rows, "parquet": _parquet_rows}


def rows_open(fh: IO[bytes], *, format: str) -> RowSource:
    return _READERS[format](fh)


def row_validate(row: Any) -> tuple[dict[str, Any] | None, dict[str, list[str]] | None]:
    """(validated data with the job's ``domain``, None) for a good row, (None, {field: [reasons]})
    for a bad one."""
    if isinstance(row, _Unparsed):
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
