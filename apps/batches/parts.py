"""Part files and the manifest in the result storage (FR-10).

A batch lives under ``<SCRAPEJOBS_BATCH_KEY_PREFIX>/<batch id>/``: ``part-00000.parquet``, … and
``manifest.json``, written last. Each object appears whole or not at all: on S3 a single PUT is
atomic; on local disk the file is written beside the storage and renamed into place. So the
manifest's appearance is the one write that makes a batch real, and it names every part with its
row count, size and SHA-256, which is how the loader tells a damaged part from a good one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from django.conf import settings
from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, Storage

from apps.jobs.bulk import STAGE_COLUMNS
from apps.results.storage import results_storage

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
_ARROW_TYPES = {"uuid": pa.binary(16), "int4": pa.int32(), "text": pa.string(), "bool": pa.bool_()}
# The part file's columns are the staging table's, by name and in order (apps/jobs/bulk.py).
PART_SCHEMA = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in STAGE_COLUMNS])
# A part written by the release before re-fetching (FR-33, FR-34) lacks its two last columns (a
# batch accepted before an upgrade and loaded after it): its rows load as rows that did not ask.
_PART_SCHEMA_BEFORE_REFETCHING = pa.schema(list(PART_SCHEMA)[:-2])
# zstd level 3: the seed's choice; a fraction of the size of the JSON rows at little CPU.
PART_COMPRESSION = "zstd"
PART_COMPRESSION_LEVEL = 3


class ManifestMissing(Exception):
    """The batch has no manifest: it is not real, and nothing of it may be loaded."""


class PartDamaged(Exception):
    """A part does not match what the manifest says of it (size, checksum, rows, schema)."""


@dataclass(frozen=True)
class PartInfo:
    number: int
    key: str
    rows: int
    size: int
    sha256: str


def batch_prefix(batch_id: uuid.UUID) -> str:
    return f"{settings.SCRAPEJOBS_BATCH_KEY_PREFIX}/{batch_id}"


def manifest_key(batch_id: uuid.UUID) -> str:
    return f"{batch_prefix(batch_id)}/{MANIFEST_NAME}"


def _object_put(storage: Storage, key: str, path: str) -> None:
    """Put a finished local file in place under ``key``, atomically (see the module docstring)."""
    if isinstance(storage, FileSystemStorage):
        final = Path(storage.path(key))
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, final)
        return
    with open(path, "rb") as fh:
        storage.save(key, File(fh, name=key))


def _spool_path(storage: Storage) -> str:
    """A temporary file on the storage's own disk when it is local (so that putting it in place
    is a rename), else in the system temp dir."""
    directory = None
    if isinstance(storage, FileSystemStorage):
        directory = Path(storage.location) / ".spool"
        directory.mkdir(parents=True, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix="batch-", suffix=".tmp", dir=directory)
    os.close(fd)
    return path


def _sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def part_write(*, batch_id: uuid.UUID, number: int, table: pa.Table) -> PartInfo:
    """Write one Parquet part (zstd) of the given part rows (PART_SCHEMA) and put it in the storage."""
    storage = results_storage()
    path = _spool_path(storage)
    try:
        pq.write_table(table, path, compression=PART_COMPRESSION, compression_level=PART_COMPRESSION_LEVEL)
        info = PartInfo(
            number=number,
            key=f"{batch_prefix(batch_id)}/part-{number:05d}.parquet",
            rows=table.num_rows,
            size=os.path.getsize(path),
            sha256=_sha256_of(path),
        )
        _object_put(storage, info.key, path)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return info


@dataclass(frozen=True)
class Manifest:
    parts: list[PartInfo]
    # What intake counted: rows read, rows rejected and the first rejected rows with reasons.
    counts: dict[str, Any]


def manifest_write(
    *, batch_id: uuid.UUID, tenant_id: uuid.UUID, parts: list[PartInfo], counts: dict[str, Any]
) -> str:
    """Write the manifest, the last object of a batch; returns its key."""
    storage = results_storage()
    body = {
        "version": MANIFEST_VERSION,
        "batch": str(batch_id),
        "tenant": str(tenant_id),
        "rows": sum(p.rows for p in parts),
        "counts": counts,
        "parts": [asdict(p) for p in parts],
        "written_at": datetime.now(tz=UTC).isoformat(),
    }
    key = manifest_key(batch_id)
    if isinstance(storage, FileSystemStorage):
        path = _spool_path(storage)
        Path(path).write_text(json.dumps(body))
        _object_put(storage, key, path)
    else:
        storage.save(key, ContentFile(json.dumps(body).encode(), name=key))
    return key


def manifest_read(*, batch_id: uuid.UUID) -> Manifest:
    """The parts the manifest lists; ``ManifestMissing`` without one (or with one that does not
    parse, which an atomic put cannot produce: it was tampered with)."""
    storage = results_storage()
    key = manifest_key(batch_id)
    if not storage.exists(key):
        raise ManifestMissing(f"no manifest at {key}")
    with storage.open(key, "rb") as fh:
        try:
            body = json.loads(fh.read())
            return Manifest(parts=[PartInfo(**p) for p in body["parts"]], counts=dict(body["counts"]))
        except (ValueError, KeyError, TypeError) as e:
            raise ManifestMissing(f"the manifest at {key} is unreadable: {e}") from e


def part_fetch(part: PartInfo) -> str:
    """Copy a part to a local temporary file and check it against the manifest; returns its path
    (the caller removes it). ``PartDamaged`` when it is missing or differs in any way."""
    storage = results_storage()
    path = _spool_path(storage)
    try:
        try:
            with storage.open(part.key, "rb") as src, open(path, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        except FileNotFoundError:
            raise PartDamaged(f"part {part.number} ({part.key}) is missing") from None
        size = os.path.getsize(path)
        if size != part.size or _sha256_of(path) != part.sha256:
            raise PartDamaged(
                f"part {part.number} ({part.key}) does not match its manifest entry "
                f"(size {size}, expected {part.size}; or its SHA-256 differs)"
            )
        try:
            meta = pq.read_metadata(path)
            schema = pq.read_schema(path)
        except (pa.ArrowException, OSError) as e:
            raise PartDamaged(f"part {part.number} ({part.key}) is not a readable Parquet file: {e}") from e
        known = schema.equals(PART_SCHEMA) or schema.equals(_PART_SCHEMA_BEFORE_REFETCHING)
        if meta.num_rows != part.rows or not known:
            raise PartDamaged(
                f"part {part.number} ({part.key}) has other rows or columns than its manifest says"
            )
    except BaseException:
        os.unlink(path)
        raise
    return path


def part_table(path: str) -> pa.Table:
    """The rows of a checked part, as an Arrow table with the staging table's columns (those an
    older part lacks: nulls)."""
    table = pq.read_table(path)
    for f in PART_SCHEMA:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table.select(PART_SCHEMA.names).cast(PART_SCHEMA)


def batch_objects_remove(*, batch_id: uuid.UUID) -> int:
    """Remove every object of a batch (its parts, and its manifest if any); returns how many."""
    storage = results_storage()
    prefix = batch_prefix(batch_id)
    try:
        _, files = storage.listdir(prefix)
    except FileNotFoundError:
        return 0
    for name in files:
        storage.delete(f"{prefix}/{name}")
    return len(files)


def batch_parts_remove(*, keys: list[str]) -> int:
    """Remove these objects of a batch (a missing one counts as removed); returns how many."""
    storage = results_storage()
    for key in keys:
        storage.delete(key)
    return len(keys)


def orphan_batches(*, older_than: timedelta) -> list[uuid.UUID]:
    """Batches whose objects have no manifest and whose newest object is older than
    ``older_than``: parts that intake wrote and never published."""
    storage = results_storage()
    root = settings.SCRAPEJOBS_BATCH_KEY_PREFIX
    try:
        directories, _ = storage.listdir(root)
    except FileNotFoundError:
        return []
    cutoff = datetime.now(tz=UTC) - older_than
    found = []
    for name in directories:
        try:
            batch_id = uuid.UUID(name)
        except ValueError:
            continue
        _, files = storage.listdir(f"{root}/{name}")
        if MANIFEST_NAME in files:
            continue
        times = [storage.get_modified_time(f"{root}/{name}/{f}") for f in files]
        if all(t < cutoff for t in times):
            found.append(batch_id)
    return found
