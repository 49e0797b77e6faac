"""Reading a submitted batch file in its format, as rows for apps/batches/rows.py to check.

Formats: a JSON list of job objects, JSON lines (one object a line), CSV (a header line with
the job's field names; ``headers`` as a JSON object in its cell; an empty cell is an absent
field) and Parquet (apps/batches/parquet_rows.py: columns named after the fields; ``headers`` a
JSON string or a map). No reader holds a whole file: each reads a row, a line or a record at a
time, bounded by POST /jobs's limit for one job (NFR-20, docs/limits.md).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
from collections.abc import Iterator
from typing import IO, Any

from django.conf import settings

from apps.batches.parquet_rows import parquet_rows
from apps.batches.rows import (
    INT_FIELDS,
    JSON_FIELDS,
    RowSource,
    TooDeep,
    Unparsed,
    UnreadableFile,
    column_limit_check,
    json_cell,
    row_chunks,
    row_limit_check,
)

FORMATS = ("json", "jsonl", "csv", "parquet")
# Bytes read from a JSON file at a time while it is decoded row by row.
JSON_READ_BYTES = 1 << 20
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
    return RowSource(None, row_chunks(_chain_first(first, rows)))


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
    row_limit_check(count)
    fh.seek(0)

    def rows() -> Iterator[tuple[Any, int]]:
        for line in _jsonl_lines(fh):
            if line.strip():
                try:
                    yield json.loads(line), len(line)
                except (ValueError, RecursionError) as e:
                    yield Unparsed(f"not a JSON object: {e}"), len(line)

    return RowSource(count, row_chunks(rows()))


def _csv_cell(name: str, value: str) -> Any:
    """A CSV cell as the JSON value POST /jobs would get: numbers for the integer fields, an object
    for headers, true or false for ``revalidate``; anything that does not convert stays a string
    and is refused by the rules."""
    if name in INT_FIELDS and value.strip().lstrip("-").isdigit():
        return int(value)
    if name in _BOOL_FIELDS and value.strip() in ("true", "false"):
        return value.strip() == "true"
    if name in JSON_FIELDS:
        return json_cell(name, value)
    return value


def _csv_record(record: dict[str, str]) -> Any:
    try:
        return {k: _csv_cell(k, v) for k, v in record.items() if v != "" and v is not None}
    except TooDeep as e:
        return Unparsed(e.reason)


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
        row_limit_check(count)
        text.seek(0)
        records = _csv_records(text)
        names = next(records, None)
        if not names or not names[0]:
            raise UnreadableFile("a CSV batch needs a header line naming the fields")
        fieldnames = names[0]
        column_limit_check(len(fieldnames))
    except (UnicodeDecodeError, csv.Error) as e:
        raise UnreadableFile(f"not a UTF-8 CSV file: {e}") from None

    def rows() -> Iterator[tuple[Any, int]]:
        try:
            for cells, size in records:
                if not cells:
                    continue  # a blank line, as csv.DictReader skips it
                if len(cells) > len(fieldnames):
                    yield Unparsed("more cells than the header line has names"), size
                    continue
                yield _csv_record(dict(zip(fieldnames, cells, strict=False))), size
        except (UnicodeDecodeError, csv.Error) as e:
            yield Unparsed(f"unreadable CSV: {e}"), 0

    return RowSource(max(count, 0), row_chunks(rows()))


_READERS = {"json": _json_rows, "jsonl": _jsonl_rows, "csv": _csv_rows, "parquet": parquet_rows}


def rows_open(fh: IO[bytes], *, format: str) -> RowSource:
    return _READERS[format](fh)
