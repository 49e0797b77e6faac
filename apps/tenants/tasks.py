"""Tenants' periodic task. Thin: it calls one service. Its cadence is in scrapejobs/celery.py."""

from __future__ import annotations

from celery import shared_task

from apps.tenants.services import tokens_last_used_flush as _tokens_last_used_flush


@shared_task(
    name="apps.tenants.tasks.tokens_last_used_flush", queue="control", soft_time_limit=50, time_limit=60
)
def tokens_last_used_flush() -> int:
    return _tokens_last_used_flush()
