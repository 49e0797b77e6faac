"""The crawl expander, on the control queue (scrapejobs/celery.py). Thin: it calls one service."""

from __future__ import annotations

from celery import shared_task

from apps.crawls.expansion import crawls_expand as _crawls_expand


# Beat runs it every SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S. Safe to run twice at once: a page is
# expanded once and the budget is taken under the crawl row's lock (apps/crawls/pages.py).
@shared_task(name="apps.crawls.tasks.crawls_expand", queue="control", soft_time_limit=50, time_limit=60)
def crawls_expand() -> int:
    return _crawls_expand()
