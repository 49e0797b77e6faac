"""``python manage.py writer_run``: flush the receipts stream in a loop, without Celery.

The same flush as beat's ``apps.writer.tasks.writer_flush`` (lease included, so it can run next
to the beat-driven writer), for a dedicated writer process and for the tests that SIGKILL one.
SIGTERM/SIGINT stop it after the current flush.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from apps.writer.flush import writer_flush


class Command(BaseCommand):
    help = "Run the leased receipts writer in a loop (one flush per interval)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=None, help="seconds between flushes")
        parser.add_argument("--trace-key", default=None, help="Redis list to log lease periods to")

    def handle(self, *args: Any, **options: Any) -> None:
        interval = options["interval"] or settings.SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write(f"writer_run: flushing every {interval}s", ending="\n")
        self.stdout.flush()
        while not stop.is_set():
            stats = writer_flush(budget_s=0.8 * interval, trace_key=options["trace_key"])
            if stats.acked or stats.dead:
                self.stdout.write(f"flush: acked={stats.acked} applied={stats.applied} dead={stats.dead}")
            # Backlog left: go again at once (we released the lease; any writer may take it).
            if not (stats.held and stats.read):
                stop.wait(interval)
