"""The Celery application: queues, routes, time limits and the beat schedule, all in one place.

Queues: ``jobs.high``, ``jobs.normal``, ``jobs.low`` carry scrape messages (one per job, routed by
the job's priority); ``control`` carries the small bookkeeping tasks (publisher, sweeper, writer,
webhooks) so that they never wait behind a backlog of scrapes.
"""

from __future__ import annotations

import os

from celery import Celery
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")

app = Celery("scrapejobs")
app.config_from_object("django.conf:settings", namespace="CELERY")

SCRAPE_QUEUES = ("jobs.high", "jobs.normal", "jobs.low")
CONTROL_QUEUE = "control"
WEBHOOK_QUEUE = "webhooks"

app.conf.task_queues = [Queue(name) for name in (*SCRAPE_QUEUES, CONTROL_QUEUE, WEBHOOK_QUEUE)]
app.conf.task_default_queue = CONTROL_QUEUE
# Every task has both limits; the scrape task's are derived from the job's timeout in its code.
app.conf.task_soft_time_limit = 330
app.conf.task_time_limit = 360


def _beat_schedule() -> dict:
    from django.conf import settings  # noqa: PLC0415 - settings are read once Django is set up

    return {
        # Outbox publisher. If it stops: accepted jobs are never sent to workers (intake still
        # answers 202, jobs sit in `queued` with an empty published_at; age of oldest job grows).
        "outbox-publish": {
            "task": "apps.publishing.tasks.outbox_publish",
            "schedule": settings.SCRAPEJOBS_PUBLISH_INTERVAL_S,
            "options": {"expires": max(settings.SCRAPEJOBS_PUBLISH_INTERVAL_S * 5, 5)},
        },
        # Stuck-sweeper. If it stops: jobs of a crashed worker stay `running` forever and jobs
        # whose broker message was lost stay `queued` forever.
        "stuck-sweep": {
            "task": "apps.scheduling.tasks.sweep_stuck_jobs",
            "schedule": settings.SCRAPEJOBS_SWEEP_INTERVAL_S,
            "options": {"expires": max(settings.SCRAPEJOBS_SWEEP_INTERVAL_S * 2, 10)},
        },
    }


@app.on_after_finalize.connect
def _install_beat_schedule(sender: Celery, **_: object) -> None:
    sender.conf.beat_schedule = _beat_schedule()


app.autodiscover_tasks()
