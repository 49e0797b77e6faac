"""``python manage.py writer_status``: the writer's lag, backlog, batches and dead receipts as
``name: value`` lines (the same figures as the admin's writer page)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from apps.writer.selectors import writer_status


class Command(BaseCommand):
    help = "Show the leased writer's lag, pending receipts, batch sizes and dead receipts."

    def handle(self, *args: Any, **options: Any) -> None:
        for name, value in writer_status().lines():
            self.stdout.write(f"{name}: {value}")
