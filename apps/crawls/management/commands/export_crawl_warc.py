"""``manage.py export_crawl_warc CRAWL_ID PATH``: a crawl's pages as a gzipped WARC file, as
``GET /api/v1/crawls/{id}/warc`` streams it (FR-47, docs/crawls.md). Written to PATH.part and
renamed when complete, so a file at PATH is never half a crawl."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.crawls.models import Crawl
from apps.crawls.warc import WarcCounts, crawl_warc_chunks


class Command(BaseCommand):
    help = "Write a crawl's stored pages as a gzipped WARC 1.1 file (response and revisit records)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("crawl_id", help="the crawl's id")
        parser.add_argument("path", help="the file to write (conventionally *.warc.gz)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            crawl = Crawl.objects.get(id=uuid.UUID(options["crawl_id"]))
        except (ValueError, Crawl.DoesNotExist):
            raise CommandError(f"no crawl {options['crawl_id']!r}") from None
        path = Path(options["path"])
        part = path.with_name(path.name + ".part")
        counts = WarcCounts()
        try:
            with part.open("wb") as out:
                for chunk in crawl_warc_chunks(crawl=crawl, counts=counts):
                    out.write(chunk)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        os.replace(part, path)
        self.stdout.write(
            f"{path}: {counts.responses} response and {counts.revisits} revisit records; "
            f"{counts.skipped} pages without a stored body left out"
        )
