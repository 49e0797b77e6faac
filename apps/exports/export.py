"""Analytics exports (FR-10): finished jobs and their attempts as
Parquet part files (zstd) plus a manifest written last, in the result storage (local or S3).

The manifest is the only write that matters: it is one object that appears whole or not at all
(apps.results.storage.storage_put_file), and it lists every part with its row count and SHA-256.
A reader trusts a window's export only through its manifest. Each window has a fixed prefix,
``<SCRAPEJOBS_EXPORT_PREFIX>/<since>_<until>/``, so an export that died halfway (parts, no
manifest) is redone by running it again: the leftovers are removed first, then every part is
written anew, then the manifest. A window that has its manifest is never written again.

The ledger is read a page at a time (apps.jobs.export_reads, keyset on (finished_at, id)); one
page of jobs and their attempts is one part of each table, written to a temporary file and then
put in the storage, so memory is bounded by the part size whatever the window holds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from django.conf import settings

from apps.jobs.export_reads import (
    EXPORT_ATTEMPT_COLUMNS,
    EXPORT_JOB_COLUMNS,
    export_attempts_of,
    export_jobs_page,
)
from apps.results.locks import session_lock
from apps.results.storage import results_storage, storage_files_under, storage_put_file

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "scrapejobs-export"
MANIFEST_VERSION = 1
PARQUET_CONTENT_TYPE = "application/vnd.apache.parquet"
# A day's export waits this long after the day ended: a receipt applied late (writer lag) still
# carries its attempt's finish time, which may fall inside the day.
DAILY_SETTLE = timedelta(hours=1)
# The daily task looks back this many days, so a beat that was down a day catches up.
DAILY_LOOKBACK_DAYS = 2

_Row = tuple[Any, ...]
# apps.jobs.export_reads gives times as microseconds since the epoch, which this type takes as is.
_TS = pa.timestamp("us", tz="UTC")
JOB_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("tenant_id", pa.string()),
        ("method", pa.string()),
        ("url", pa.string()),
        ("domain", pa.string()),
        ("priority", pa.string()),
        ("status", pa.string()),
        ("attempts", pa.int32()),
        ("max_attempts", pa.int32()),
        ("created_at", _TS),
        ("started_at", _TS),
        ("finished_at", _TS),
        ("last_error_class", pa.string()),
        ("last_error_message", pa.string()),
        ("last_error_http_status", pa.int32()),
        ("result_key", pa.string()),
        ("result_size", pa.int64()),
        ("result_sha256", pa.string()),
        ("result_content_type", pa.string()),
        ("result_http_status", pa.int32()),
        ("result_stored_at", _TS),
        ("result_deleted_at", _TS),
    ]
)
ATTEMPT_SCHEMA = pa.schema(
    [
        ("job_id", pa.string()),
        ("number", pa.int32()),
        ("worker", pa.string()),
        ("started_at", _TS),
        ("finished_at", _TS),
        ("outcome", pa.string()),
        ("http_status", pa.int32()),
        ("error_class", pa.string()),
        ("error", pa.string()),
        ("duration_ms", pa.int64()),
    ]
)
assert tuple(JOB_SCHEMA.names) == EXPORT_JOB_COLUMNS, "the job schema follows export_jobs_page"
assert tuple(ATTEMPT_SCHEMA.names) == EXPORT_ATTEMPT_COLUMNS, "the attempt schema follows export_attempts_of"


class ExportWindowInvalid(ValueError):
    """``since`` is not before ``until``, or either has no time zone."""


class ExportBusy(Exception):
    """Another process is exporting the same window right now."""


@dataclass(frozen=True)
class ExportOutcome:
    prefix: str
    manifest_key: str
    written: bool  # False: the window already had its manifest, nothing was touched
    jobs: int = 0
    attempts: int = 0
    parts: int = 0


def export_prefix(*, since: datetime, until: datetime) -> str:
    """The window's fixed prefix, ``<SCRAPEJOBS_EXPORT_PREFIX>/<since>_<until>`` in UTC."""
    fmt = "%Y%m%dT%H%M%SZ"
    return f"{settings.SCRAPEJOBS_EXPORT_PREFIX}/{since.astimezone(UTC):{fmt}}_{until.astimezone(UTC):{fmt}}"


def export_window(*, since: datetime, until: datetime, part_rows: int | None = None) -> ExportOutcome:
    """Export the jobs that finished in ``[since, until)`` and their attempts, unless the window
    already has its manifest. Safe to run again after a crash at any point."""
    if since.tzinfo is None or until.tzinfo is None or since >= until:
        raise ExportWindowInvalid(
            f"an export window needs since < until, both with a time zone: {since}, {until}"
        )
    prefix = export_prefix(since=since, until=until)
    manifest_key = f"{prefix}/{MANIFEST_NAME}"
    storage = results_storage()
    if storage.exists(manifest_key):
        return ExportOutcome(prefix=prefix, manifest_key=manifest_key, written=False)
    # Two runs of one window (beat's and an operator's) would delete each other's parts.
    with session_lock(f"scrapejobs.export:{prefix}") as taken:
        if not taken:
            raise ExportBusy(f"another process is exporting {prefix}")
        if storage.exists(manifest_key):  # the other run finished between the check and the lock
            return ExportOutcome(prefix=prefix, manifest_key=manifest_key, written=False)
        return _export_unlocked(since=since, until=until, prefix=prefix, part_rows=part_rows)


def _export_unlocked(
    *, since: datetime, until: datetime, prefix: str, part_rows: int | None
) -> ExportOutcome:
    storage = results_storage()
    manifest_key = f"{prefix}/{MANIFEST_NAME}"
    # What an export that died here left behind: its parts are not this run's and, with another
    # part size, not even the same files; a glob over the prefix must find this run's only.
    for key in storage_files_under(prefix):
        storage.delete(key)
    limit = part_rows or settings.SCRAPEJOBS_EXPORT_PART_ROWS
    tables: dict[str, list[dict[str, Any]]] = {"jobs": [], "attempts": []}
    with tempfile.TemporaryDirectory(prefix="sj-export-") as scratch:
        for number, (jobs, attempts) in enumerate(_pages(since=since, until=until, limit=limit)):
            tables["jobs"].append(
                _put_part(scratch, f"{prefix}/jobs/part-{number:05d}.parquet", jobs, JOB_SCHEMA)
            )
            tables["attempts"].append(
                _put_part(scratch, f"{prefix}/attempts/part-{number:05d}.parquet", attempts, ATTEMPT_SCHEMA)
            )
        manifest = _manifest(since=since, until=until, tables=tables)
        path = os.path.join(scratch, MANIFEST_NAME)
        with open(path, "wb") as fh:
            fh.write(json.dumps(manifest, indent=2).encode())
        storage_put_file(key=manifest_key, path=path, content_type="application/json")
    return ExportOutcome(
        prefix=prefix,
        manifest_key=manifest_key,
        written=True,
        jobs=manifest["tables"]["jobs"]["rows"],
        attempts=manifest["tables"]["attempts"]["rows"],
        parts=len(tables["jobs"]),
    )


def export_daily(*, now: datetime | None = None) -> list[ExportOutcome]:
    """Export each of the last DAILY_LOOKBACK_DAYS whole UTC days that ended at least
    DAILY_SETTLE ago and has no manifest yet (what beat runs; a day already exported costs one
    existence check; a day another process is exporting is skipped)."""
    now = now or datetime.now(tz=UTC)
    last_end = (now - DAILY_SETTLE).replace(hour=0, minute=0, second=0, microsecond=0)
    days = [last_end - timedelta(days=n) for n in range(DAILY_LOOKBACK_DAYS, 0, -1)]
    outcomes = []
    for day in days:
        try:
            outcomes.append(export_window(since=day, until=day + timedelta(days=1)))
        except ExportBusy:  # an operator's run has it; the next hourly run checks again
            logger.info("export of %s skipped: another process is exporting it", day.date())
    return outcomes


def _pages(*, since: datetime, until: datetime, limit: int) -> Iterator[tuple[list[_Row], list[_Row]]]:
    """(jobs, their attempts) a page at a time; one empty page for an empty window, so that every
    export has at least one part of each table, with its schema."""
    after: tuple[int, str] | None = None
    first = True
    while True:
        jobs = export_jobs_page(since=since, until=until, after=after, limit=limit)
        if not jobs and not first:
            return
        first = False
        yield jobs, export_attempts_of(job_ids=[row[0] for row in jobs])
        if len(jobs) < limit:
            return
        last = jobs[-1]
        after = (last[EXPORT_JOB_COLUMNS.index("finished_at")], last[0])


def _put_part(scratch: str, key: str, rows: Sequence[tuple[Any, ...]], schema: pa.Schema) -> dict[str, Any]:
    """Write ``rows`` as one zstd Parquet file and put it in the storage; its manifest entry."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema.names]
    table = pa.Table.from_arrays(
        [pa.array(list(col), type=field.type) for col, field in zip(columns, schema, strict=True)],
        schema=schema,
    )
    path = os.path.join(scratch, key.replace("/", "_"))
    pq.write_table(table, path, compression="zstd")
    entry = {"key": key, "rows": table.num_rows, "bytes": os.path.getsize(path), "sha256": _sha256(path)}
    storage_put_file(key=key, path=path, content_type=PARQUET_CONTENT_TYPE)
    Path(path).unlink(missing_ok=True)  # a storage may have moved it into place
    return entry


def _manifest(*, since: datetime, until: datetime, tables: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "window": {"since": _iso(since), "until": _iso(until), "column": "finished_at"},
        "created_at": _iso(datetime.now(tz=UTC)),
        "compression": "zstd",
        "tables": {
            name: {"rows": sum(p["rows"] for p in parts), "parts": parts} for name, parts in tables.items()
        },
    }


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()
