"""Result storages that stall, for the worker processes of tests/scraping/test_storage_stall.py
(a stuck disk or object store). A test selects one with
``SCRAPEJOBS_TEST_RESULTS_BACKEND`` (read by settings/test.py only)."""

from __future__ import annotations

import threading
from typing import Any

from django.core.files.storage import Storage


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
