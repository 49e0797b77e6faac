"""Result storages that stall or fill up, for the worker processes of
tests/scraping/test_storage_stall.py (a stuck disk or object store, a full disk). A test selects one with
``SCRAPEJOBS_TEST_RESULTS_BACKEND`` (read by settings/test.py only)."""

from __future__ import annotations

import errno
import os
import threading
from typing import Any

from django.core.files.storage import FileSystemStorage, Storage


class SaveStallsStorage(Storage):
    """Accepts the connection and never finishes an upload: ``save`` blocks forever."""

    def __init__(self, **_options: Any):
        pass

    def _save(self, name: str, content: Any) -> str:
        threading.Event().wait()  # never set
        raise AssertionError("unreachable")

    def exists(self, name: str) -> bool:
        return False


class OpenStallsStorage(Storage):
    """Never answers at all: even making the client blocks forever (before any upload starts,
    where the upload's own bound does not reach; only the lease keeper's deadline does)."""

    def __init__(self, **_options: Any):
        threading.Event().wait()  # never set


class DiskFullStorage(FileSystemStorage):
    """Local result storage on a disk that is full while the file named by
    ``SCRAPEJOBS_TEST_DISK_FULL_FLAG`` exists, and has room again once the test removes it. Its
    location is SCRAPEJOBS_RESULTS_DIR, like the default local storage's.

    The worker stores a local body by writing a spool file next to the results and renaming it
    into place (apps/results/storage.py); the rename asks the storage for the final file's
    ``path`` first, as ``save`` does for other writers. A full disk raises OSError(ENOSPC) there:
    the spool write itself goes to the real disk, which has room."""

    def __init__(self, **options: Any):
        from django.conf import settings

        options.setdefault("location", str(settings.SCRAPEJOBS_RESULTS_DIR))
        options.setdefault("allow_overwrite", True)
        super().__init__(**options)
        self.flag = os.environ["SCRAPEJOBS_TEST_DISK_FULL_FLAG"]

    def _full(self, name: str) -> None:
        if os.path.exists(self.flag):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), name)

    def path(self, name: str) -> str:
        self._full(name)
        return super().path(name)
