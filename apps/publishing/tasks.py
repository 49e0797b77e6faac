"""The outbox publisher task: run by beat every SCRAPEJOBS_PUBLISH_INTERVAL_S (see
scrapejobs/celery.py) and nudged by intake after each commit; with the broker kept shallow
(SCRAPEJOBS_DISPATCH_DEPTH) each run tops it up. Safe to run concurrently (one runs, the others
return at once)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from apps.publishing.publisher import outbox_publish as outbox_publish_service

# Budget for one run: long enough to drain a burst, short enough that a run never overlaps many
# of its successors (beat's messages for this task expire after 5 intervals).
_BUDGET_S = 5.0


@shared_task(
    name="apps.publishing.tasks.outbox_publish", ignore_result=True, soft_time_limit=20, time_limit=30
)
def outbox_publish() -> int:
    return outbox_publish_service(
        batch_size=settings.SCRAPEJOBS_PUBLISH_BATCH_SIZE,
        budget_s=_BUDGET_S,
        depth=settings.SCRAPEJOBS_DISPATCH_DEPTH,
        browser_depth=settings.SCRAPEJOBS_BROWSER_DISPATCH_DEPTH,
    )
