"""Where result bodies live: ``storages["results"]`` (local files by default, S3 when configured).

A body is streamed to a spool file on disk while its SHA-256 and size are computed (it is never
held whole in memory), then handed to the storage: a rename for local files on the same disk, a
(multipart) upload for S3. Keys are deterministic, ``<prefix>/<yyyy>/<mm>/<dd>/<job_id>/<attempt>``
with the date of the job's creation (from its UUIDv7), so storing the same attempt again
overwrites the same object instead of leaving an orphan.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from django.conf import settings
from django.core.files import File
from django.core.files.storage import FileSystemStorage, Storage, storages

from apps.jobs.receipts import ResultStored

RESULTS_STORAGE_ALIAS = "results"
_COPY_BUFFER = 1024 * 1024


class ResultStoreFailed(Exception):
    """Writing the spool file or saving it to the storage failed (disk full, S3 down...)."""


def results_storage() -> Storage:
    return storages[RESULTS_STORAGE_ALIAS]


def result_key(*, job_id: uuid.UUID | str, attempt: int) -> str:
    job_uuid = uuid.UUID(str(job_id))
    if job_uuid.version == 7:  # the first 48 bits are the creation time in Unix milliseconds
        created = datetime.fromtimestamp((job_uuid.int >> 80) / 1000, tz=UTC)
    else:
        created = datetime.now(tz=UTC)
    prefix = settings.SCRAPEJOBS_RESULT_KEY_PREFIX.strip("/")
    return f"{prefix}/{created:%Y/%m/%d}/{job_uuid}/{attempt}"


class _SpoolFile(File):
    """A finished spool file. ``temporary_file_path`` lets FileSystemStorage move it into place
    instead of copying it."""

    content_type: str | None

    def temporary_file_path(self) -> str:
        return str(self.name)


def result_store(
    *,
    job_id: uuid.UUID | str,
    attempt: int,
    chunks: Iterable[bytes],
    content_type: str | None = None,
    http_status: int = 200,
) -> ResultStored:
    """Store a body given as chunks; returns what the ledger records about it.

    Any exception out of ``chunks`` (a stopped or failed fetch) propagates, and nothing is
    stored: the spool file is removed either way."""
    storage = results_storage()
    key = result_key(job_id=job_id, attempt=attempt)
    digest = hashlib.sha256()
    size = 0
    try:
        try:
            spool = _spool_open(storage, key)
        except FileNotFoundError:  # the spool directory was removed since this process made it
            _spool_dirs.clear()
            spool = _spool_open(storage, key)
    except OSError as e:
        raise ResultStoreFailed(f"cannot create a spool file: {e}") from e
    try:
        with spool:
            for chunk in chunks:  # what the producer raises (a stopped fetch) propagates as is
                digest.update(chunk)
                size += len(chunk)
                try:
                    spool.write(chunk)
                except OSError as e:
                    raise ResultStoreFailed(f"spooling the body failed: {e}") from e
        try:
            if isinstance(storage, FileSystemStorage):
                saved = _local_move(storage, key, spool.name)
            else:
                with open(spool.name, "rb") as fh:
                    content = _SpoolFile(fh, name=spool.name)
                    # S3Storage reads this attribute for the object's Content-Type.
                    content.content_type = content_type or "application/octet-stream"
                    saved = storage.save(key, content)
        except Exception as e:  # noqa: BLE001 - any backend's failure (OSError, botocore...) is one class
            raise ResultStoreFailed(f"saving {key} failed: {type(e).__name__}: {e}") from e
    finally:
        try:
            os.unlink(spool.name)
        except FileNotFoundError:  # moved into place by FileSystemStorage
            pass
    return ResultStored(
        key=saved,
        size=size,
        sha256=digest.hexdigest(),
        content_type=content_type,
        http_status=http_status,
    )


def _spool_open(storage: Storage, key: str) -> IO[bytes]:
    """A new spool file for ``key``. Next to local results it is named after the key and the
    writing thread (unique: one thread stores one attempt at a time; a leftover of a killed
    process is overwritten, not added to), which spares tempfile's random names and exclusive
    create: about a third of storing a small body (issue 7). Elsewhere a temporary file."""
    directory = _spool_dir(storage)
    if directory is None:
        return tempfile.NamedTemporaryFile(prefix="result-", delete=False)  # noqa: SIM115 - closed by the caller
    name = f"{key.replace('/', '_')}.{os.getpid()}.{threading.get_ident()}"
    return open(os.path.join(directory, name), "wb")  # noqa: SIM115 - closed by the caller


def _local_move(storage: FileSystemStorage, key: str, spool: str) -> str:
    """Put a finished spool file in place under ``key``: one rename on the same disk (atomic: a
    reader sees the old file or the new one, never half of one). What ``storage.save`` does for a
    file with a temporary path, without its name search and copy fallback, which cost about a
    twentieth of the worker's time per job at a 1 ms target (issue 7); keys are unique per attempt
    and a retried store replaces its own file, as ``allow_overwrite`` does."""
    final = Path(storage.path(key))
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(spool, final)
    if storage.file_permissions_mode is not None:
        os.chmod(final, storage.file_permissions_mode)
    return key


_spool_dirs: set[str] = set()


def _spool_dir(storage: Storage) -> str | None:
    """Spool next to local results so that storing is a rename; elsewhere the system temp dir."""
    if isinstance(storage, FileSystemStorage):
        path = str(Path(storage.location) / ".spool")
        if path not in _spool_dirs:  # once per process, not once per job
            Path(path).mkdir(parents=True, exist_ok=True)
            _spool_dirs.add(path)
        return path
    return None
