"""Where result bodies live: ``storages["results"]`` (local files by default, S3 when configured).

A body is streamed to a spool file on disk while its SHA-256 and size are computed (it is never
held whole in memory), then handed to the storage: a rename for local files on the same disk, a
(multipart) upload for S3. Keys are deterministic, ``<prefix>/<nn>/<name>.<attempt>``, an
opaque name made from the job's id (an HMAC under SECRET_KEY) and its first two characters (a
directory level, so that local storage never holds millions of names in one), so storing the same attempt again overwrites the same object instead
of leaving an orphan, and a key (hence a signed link or an S3 presigned URL, which carry it)
names no job: a job served another tenant's fetch links to that tenant's object without learning
its job's id (NFR-6, as ``served_from`` hides it), nor the day that job was created: keys
stored before named it (``<prefix>/<yyyy>/<mm>/<dd>/<name>/<attempt>``, from the UUIDv7), and
a signed link carries its key readable (it is signed, not encrypted). The attempt is part of the
file's name, not a file in a directory of the job's: on local storage a directory per job was a
second inode per result, made for every body (a tenth of a millisecond of a worker's CPU each,
docs/benchmarks.md) and left empty behind when retention deleted the body. Keys stored before
(``<prefix>/<nn>/<name>/<attempt>``, and the dated ones) stay where they are, read through each
job's ``result_key`` and deleted by retention and erasure (``result_keys_ever``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from django.conf import settings
from django.core.files import File
from django.core.files.storage import FileSystemStorage, Storage, storages
from django.utils.crypto import salted_hmac

from apps.jobs.receipts import ResultStored

RESULTS_STORAGE_ALIAS = "results"
_KEY_SALT = "scrapejobs.results.key"
_COPY_BUFFER = 1024 * 1024


class ResultStoreFailed(Exception):
    """Writing the spool file or saving it to the storage failed (disk full, S3 down...)."""


def results_storage() -> Storage:
    return storages[RESULTS_STORAGE_ALIAS]


def result_key(*, job_id: uuid.UUID | str, attempt: int) -> str:
    name = _opaque_name(uuid.UUID(str(job_id)))
    prefix = settings.SCRAPEJOBS_RESULT_KEY_PREFIX.strip("/")
    return f"{prefix}/{name[:2]}/{name}.{attempt}"


def result_keys_ever(*, job_id: uuid.UUID | str, attempt: int) -> list[str]:
    """Every key an attempt's body may have been stored under: ``result_key``'s; the one in a
    directory of the job's that results stored before had (``<prefix>/<nn>/<name>/<attempt>``);
    the dated one of the same name before that; and the dated one named after the job's id that
    results stored before opaque names had (retention and erasure delete all four: a missing
    object counts as deleted)."""
    job_uuid = uuid.UUID(str(job_id))
    name = _opaque_name(job_uuid)
    dated = _key_dir(job_uuid)
    prefix = settings.SCRAPEJOBS_RESULT_KEY_PREFIX.strip("/")
    return [
        result_key(job_id=job_uuid, attempt=attempt),
        f"{prefix}/{name[:2]}/{name}/{attempt}",
        f"{dated}/{name}/{attempt}",
        f"{dated}/{job_uuid}/{attempt}",
    ]


def _key_dir(job_uuid: uuid.UUID) -> str:
    """The day directory of the keys stored before they were undated (their job's creation day)."""
    if job_uuid.version == 7:  # the first 48 bits are the creation time in Unix milliseconds
        created = datetime.fromtimestamp((job_uuid.int >> 80) / 1000, tz=UTC)
    else:
        created = datetime.now(tz=UTC)
    prefix = settings.SCRAPEJOBS_RESULT_KEY_PREFIX.strip("/")
    return f"{prefix}/{created:%Y/%m/%d}"


def _opaque_name(job_uuid: uuid.UUID) -> str:
    """128 bits of an HMAC of the job's id: the same for every store of the job, unguessable
    and irreversible without SECRET_KEY."""
    return salted_hmac(_KEY_SALT, job_uuid.hex, algorithm="sha256").hexdigest()[:32]


def screenshot_key(body_key: str) -> str:
    """Where a rendered attempt's screenshot lives (FR-31): beside its body, under the body's key,
    so that a job served the body by single-flight is served the screenshot too."""
    return f"{body_key}.screenshot.png"


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
    deadline: float | None = None,
    key: str | None = None,
) -> ResultStored:
    """Store a body given as chunks; returns what the ledger records about it.

    Any exception out of ``chunks`` (a stopped or failed fetch) propagates, and nothing is
    stored: the spool file is removed either way. An upload to a remote storage still running
    at ``deadline`` (``time.monotonic()``) is given up: ``ResultStoreFailed``. ``key``: another
    object of the attempt than its body (a rendered page's screenshot, ``screenshot_key``)."""
    storage = results_storage()
    key = key or result_key(job_id=job_id, attempt=attempt)
    digest = hashlib.sha256()
    size = 0
    moved = False  # renamed into place: nothing is left to remove
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
                saved = _local_move(storage, key, spool.name, chmod=not _spool_mode_kept(storage))
                moved = True
            else:
                saved = _upload_bounded(storage, key, spool.name, content_type, deadline=deadline)
        except ResultStoreFailed:
            raise
        except Exception as e:  # noqa: BLE001 - any backend's failure (OSError, botocore...) is one class
            raise ResultStoreFailed(f"saving {key} failed: {type(e).__name__}: {e}") from e
    finally:
        if not moved:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(spool.name)
    return ResultStored(
        key=saved, size=size, sha256=digest.hexdigest(), content_type=content_type, http_status=http_status
    )


def _upload_bounded(
    storage: Storage, key: str, spool: str, content_type: str | None, *, deadline: float | None
) -> str:
    """``storage.save`` of the spool file, given up at ``deadline``.

    An upload has no bound of its own (boto3's socket timeouts bound each read, not a transfer
    that trickles, nor a client that retries for ever) and no cancel check, and the thread that
    runs it holds a worker slot. So it runs in a thread of its own, and the attempt waits for it
    until the deadline only; a thread stuck past it is abandoned (it cannot be stopped from
    outside) and ends whenever the storage answers. Its late object, if any, is under this
    attempt's key, which the ledger never records. One thread per upload: next to an upload over
    the network its cost is nothing. A local store is a rename and is not bounded here; the lease
    keeper's deadline covers a disk that stalls (apps.scraping.leases)."""

    def upload() -> str:
        with open(spool, "rb") as fh:
            content = _SpoolFile(fh, name=spool)
            # S3Storage reads this attribute for the object's Content-Type.
            content.content_type = content_type or "application/octet-stream"
            return storage.save(key, content)

    if deadline is None:
        return upload()
    future: Future[str] = Future()

    def run() -> None:
        try:
            future.set_result(upload())
        except BaseException as e:  # noqa: BLE001 - handed to the waiting attempt
            future.set_exception(e)

    threading.Thread(target=run, name=f"result-upload {key}", daemon=True).start()
    allowed = max(0.0, deadline - time.monotonic())
    try:
        return future.result(timeout=allowed)
    except FutureTimeout:
        raise ResultStoreFailed(
            f"saving {key} did not finish within the job's deadline and storage allowance "
            f"({allowed:.1f} s left for it); given up"
        ) from None


def _spool_open(storage: Storage, key: str) -> IO[bytes]:
    """A new spool file for ``key``. Next to local results it is named after the key and the
    writing thread (unique: one thread stores one attempt at a time; a leftover of a killed
    process is overwritten, not added to), which spares tempfile's random names and exclusive
    create: about a third of storing a small body. Elsewhere a temporary file."""
    directory = _spool_dir(storage)
    if directory is None:
        return tempfile.NamedTemporaryFile(prefix="result-", delete=False)  # noqa: SIM115 - closed by the caller
    name = f"{key.replace('/', '_')}.{os.getpid()}.{threading.get_ident()}"
    wanted = getattr(storage, "file_permissions_mode", None)  # a FileSystemStorage's (spooled next to it)
    mode = 0o666 if wanted is None else wanted

    def opener(path: str, flags: int) -> int:
        # Created with the results' mode (FILE_UPLOAD_PERMISSIONS, less the umask): where the
        # umask leaves it whole, the file needs no chmod once in place (``_spool_mode_kept``).
        return os.open(path, flags, mode)

    return open(os.path.join(directory, name), "wb", opener=opener)  # noqa: SIM115 - closed by the caller


def _process_umask() -> int | None:
    """This process's umask (Linux: read, not set, so no other thread's file sees it changed);
    None where it cannot be read."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return None


_umask: list[int | None] = []


def _spool_mode_kept(storage: FileSystemStorage) -> bool:
    """Whether a spool file ``_spool_open`` made already has the mode results must have: the
    umask (read once per process) takes nothing from FILE_UPLOAD_PERMISSIONS. Then the
    ``chmod`` after the rename, a system call per job (NFR-11), is left out."""
    mode = storage.file_permissions_mode
    if mode is None:
        return True
    if not _umask:
        _umask.append(_process_umask())
    umask = _umask[0]
    return umask is not None and mode & ~umask == mode


def _local_move(storage: FileSystemStorage, key: str, spool: str, *, chmod: bool = True) -> str:
    """Put a finished spool file in place under ``key``: one rename on the same disk (atomic: a
    reader sees the old file or the new one, never half of one). What ``storage.save`` does for a
    file with a temporary path, without its name search and copy fallback, which cost about a
    twentieth of the worker's time per job at a 1 ms target; keys are unique per attempt
    and a retried store replaces its own file, as ``allow_overwrite`` does."""
    final = Path(storage.path(key))
    try:
        # The key's directory (one of 256 shards) exists after the first bodies: no mkdir
        # per job, only when the rename finds it missing (new, or removed by an operator).
        os.replace(spool, final)
    except FileNotFoundError:
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(spool, final)
    if chmod and storage.file_permissions_mode is not None:
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


# --- Files other than result bodies (exports) ---------------------------------------


def storage_put_file(*, key: str, path: str, content_type: str) -> str:
    """Put a finished local file in the result storage under ``key``, whole or not at all: a
    rename on the same disk for local storage (the file is first copied next to the results, so
    the rename is atomic), one PUT (or a multipart upload, completed at once) for S3. An export's
    manifest relies on this: a reader sees it complete or not at all."""
    storage = results_storage()
    if isinstance(storage, FileSystemStorage):
        spool_dir = _spool_dir(storage)
        with tempfile.NamedTemporaryFile(dir=spool_dir, prefix="put-", delete=False) as staged:
            with open(path, "rb") as source:
                while chunk := source.read(_COPY_BUFFER):
                    staged.write(chunk)
        return _local_move(storage, key, staged.name)
    with open(path, "rb") as fh:
        content = _SpoolFile(fh, name=path)
        content.content_type = content_type
        return storage.save(key, content)


def storage_files_under(prefix: str) -> list[str]:
    """Every key below ``prefix`` (recursively); none when the prefix holds nothing."""
    storage = results_storage()
    try:
        dirs, files = storage.listdir(prefix)
    except FileNotFoundError:  # local storage: the directory was never made
        return []
    keys = [f"{prefix}/{name}" for name in files]
    for sub in dirs:
        keys.extend(storage_files_under(f"{prefix}/{sub}"))
    return keys


def result_read_chunks(*, key: str, max_bytes: int, chunk_size: int = 64 * 1024) -> Iterator[bytes]:
    """The first ``max_bytes`` of a stored body, ``chunk_size`` at a time (a crawl page's links
    and a sitemap's URLs are read by streaming parsers fed these: docs/crawls.md). The body is
    never held whole. Raises FileNotFoundError (on the first chunk) for a body that is gone."""
    left = max_bytes
    with results_storage().open(key, "rb") as fh:
        while left > 0:
            chunk = fh.read(min(chunk_size, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk
