"""Reading a Parquet batch file (docs/limits.md): its row groups counted from their own sizes, its
rows decoded a record batch at a time and checked a whole column at a time
(apps/batches/columns.py), the rows that pass leaves to decide handed to the per-row path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from apps.batches.columns import Checked, plain_rows, plain_table
from apps.batches.rows import (
    JSON_FIELDS,
    RowSource,
    TooDeep,
    Unparsed,
    UnreadableFile,
    column_limit_check,
    json_cell,
    row_limit_check,
    validated_one_by_one,
)

# Parquet is read in record batches of this many rows, whatever its footer says of its sizes (a
# footer is the sender's word: a 434-byte file can say its rows are tiny and hold 8 KiB each), and
# a record batch that decodes to more than PARQUET_BATCH_MAX_BYTES (rows of over 32 KiB on
# average) refuses the file at once (docs/limits.md: what that bounds, and what it cannot).
PARQUET_BATCH_ROWS = 512
PARQUET_BATCH_MAX_BYTES = 16 << 20
# Rows a Parquet chunk hands to the per-row path at once, as Python values.
PARQUET_PYLIST_ROWS = 4096


def _parquet_value(name: str, value: Any) -> Any:
    if name in JSON_FIELDS and isinstance(value, str):
        return json_cell(name, value)
    if name == "headers" and isinstance(value, list):  # a Parquet map reads as (key, value) pairs
        return dict(value)
    return value


def parquet_rows(fh: IO[bytes]) -> RowSource:
    try:
        parquet = pq.ParquetFile(fh)
        meta = parquet.metadata
        groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
    except (pa.ArrowException, OSError) as e:
        raise UnreadableFile(f"not a Parquet file: {e}") from None
    column_limit_check(meta.num_columns)
    # The footer's own num_rows is not what the row groups hold (a file may say 2 and hold a
    # million): their sum is the count, and the rows read are counted again as they come.
    count = sum(group.num_rows for group in groups)
    row_limit_check(count)

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
            row_limit_check(first - 1 + batch.num_rows, at_least=True)
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
        rest = validated_one_by_one(zip(pc.add(some, first).to_pylist(), rows, strict=True))
        tables.append(rest.table)
        rejected.extend(rest.rejected)
    return Checked(table=pa.concat_tables(tables), rows=batch.num_rows, rejected=rejected)


def _parquet_record(row: dict[str, Any]) -> Any:
    try:
        return {n: _parquet_value(n, v) for n, v in row.items() if v is not None}
    except TooDeep as e:
        return Unparsed(e.reason)
