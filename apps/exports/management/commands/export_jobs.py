"""``manage.py export_jobs --since 2026-11-30 --until 2026-12-01``: export the jobs that finished
in a window (and their attempts) on demand, as the daily task does for each day."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.exports.export import ExportBusy, ExportWindowInvalid, export_window


def _instant(value: str) -> datetime:
    """An ISO 8601 date or time; without a time zone it is UTC."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as e:
        raise CommandError(f"not an ISO 8601 date or time: {value!r}") from e
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Export finished jobs and their attempts of [since, until) as Parquet parts plus a manifest."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--since", required=True, help="start of the window (ISO 8601; UTC if no zone)")
        parser.add_argument("--until", required=True, help="end of the window, excluded")
        parser.add_argument("--part-rows", type=int, default=None, help="jobs per part file")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["part_rows"] is not None and options["part_rows"] < 1:
            raise CommandError("--part-rows must be at least 1")
        try:
            outcome = export_window(
                since=_instant(options["since"]),
                until=_instant(options["until"]),
                part_rows=options["part_rows"],
            )
        except (ExportWindowInvalid, ExportBusy) as e:
            raise CommandError(str(e)) from e
        if not outcome.written:
            self.stdout.write(f"{outcome.manifest_key} already exists; nothing written")
            return
        self.stdout.write(
            f"{outcome.manifest_key}: {outcome.jobs} jobs, {outcome.attempts} attempts in {outcome.parts} part(s)"
        )
