"""The operators' periodic task (scrapejobs/celery.py, ``operators-rollup``)."""

from __future__ import annotations

from celery import shared_task

from apps.operators.rollup_runner import rollup_run


@shared_task(
    name="apps.operators.tasks.operators_rollup", ignore_result=True, soft_time_limit=240, time_limit=300
)
def operators_rollup() -> int:
    """Fold new attempts into the rollups and record the queue; safe to run twice (the watermark
    row is locked while it moves)."""
    return rollup_run()
