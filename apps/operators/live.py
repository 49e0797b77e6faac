"""The live figures above the dashboard's charts (FR-9, FR-14, FR-46): the queue as it is now
(the bounded ``queue_snapshot``), the crawls, the writer, and whether the rollups that feed the
charts (apps/operators/dashboard.py) are current; what cannot be read is said in words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from apps.crawls.models import Crawl
from apps.crawls.rollups import crawls_running_count, crawls_running_newest
from apps.jobs.rollups import queue_snapshot
from apps.operators.models import CrawlTotal, RollupState
from apps.operators.rollup_runner import writer_reading


@dataclass(frozen=True)
class Now:
    """The live figures above the charts; ``problems`` are said in words at the top of the page."""

    figures: list[tuple[str, str]]
    problems: list[str]
    # The newest running crawls (FR-46), each linked to its admin page.
    crawls: list[Crawl] = field(default_factory=list)


RUNNING_CRAWLS_SHOWN = 10


def dashboard_now() -> Now:
    problems: list[str] = []
    figures: list[tuple[str, str]] = []
    try:
        snap = queue_snapshot()
        figures += [
            ("queued", str(snap.queued)),
            ("oldest queued", f"{snap.oldest_queued_age_s:.0f} s"),
            ("dispatchable", str(sum(snap.dispatchable_by_priority().values()))),
            ("oldest dispatchable", f"{snap.oldest_dispatchable_age_s:.0f} s"),
            ("running", str(snap.running)),
            ("running past lease", str(snap.running_past_lease)),
        ]
    except DatabaseError as exc:
        problems.append(f"The queue could not be read: {exc.__class__.__name__}: {exc}")
    crawls: list[Crawl] = []
    try:
        ended = dict(CrawlTotal.objects.values_list("status", "crawls"))
        figures += [
            ("crawls running", str(crawls_running_count())),
            ("crawls completed", str(ended.get("completed", 0))),
            ("crawls cancelled", str(ended.get("cancelled", 0))),
        ]
        crawls = crawls_running_newest(limit=RUNNING_CRAWLS_SHOWN)
    except DatabaseError as exc:
        problems.append(f"The crawls could not be read: {exc.__class__.__name__}: {exc}")
    lag_s, dead = writer_reading()
    if lag_s is None:
        problems.append("The writer's state could not be read: Redis did not answer.")
    else:
        figures += [("writer lag", f"{lag_s:.1f} s"), ("writer dead receipts", str(dead))]
    last = RollupState.objects.filter(pk=1).values_list("updated_at", flat=True).first()
    stale_after = timedelta(seconds=3 * settings.SCRAPEJOBS_ROLLUP_INTERVAL_S)
    if last is None:
        problems.append("The rollup task has never run: the charts stay empty until beat runs it.")
    elif timezone.now() - last > stale_after:
        problems.append(f"The rollup task last ran at {last:%Y-%m-%d %H:%M:%S} UTC: is beat running?")
    return Now(figures=figures, problems=problems, crawls=crawls)
