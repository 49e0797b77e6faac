"""The loader's tasks, on their own queue ``batches`` (scrapejobs/celery.py), so that a long load
never waits behind, or holds back, the control tasks or the scrapes. Thin: each calls one service,
imported by the task's run: the services bring pyarrow and DRF's serializers, which every Celery
process loading this module (scrape workers, beat) would import for nothing (NFR-42)."""

from __future__ import annotations

import uuid

from celery import shared_task

BATCHES_QUEUE = "batches"


# A million rows load in well under a minute; the limits only stop a loader that hangs (its lease
# then lapses and batches_resume hands the batch to another).
@shared_task(name="apps.batches.tasks.batch_load", queue=BATCHES_QUEUE, soft_time_limit=1800, time_limit=1860)
def batch_load_task(batch_id: str) -> str:
    from apps.batches.loader import batch_load  # noqa: PLC0415 - NFR-42, see the module's docstring

    return batch_load(batch_id=uuid.UUID(batch_id))


def batch_load_enqueue(batch_id: uuid.UUID) -> None:
    batch_load_task.apply_async(args=(str(batch_id),), queue=BATCHES_QUEUE)


# Beat runs it every SCRAPEJOBS_BATCH_RESUME_INTERVAL_S. Safe to run twice at once: a batch sent
# twice is claimed by one loader (the lease), the other message finds it held.
@shared_task(name="apps.batches.tasks.batches_resume", queue="control", soft_time_limit=50, time_limit=60)
def batches_resume() -> int:
    from apps.batches.selectors import batches_to_resume  # noqa: PLC0415 - NFR-42

    found = batches_to_resume()
    for batch_id in found:
        batch_load_enqueue(batch_id)
    return len(found)


# Beat runs it every BATCH_ORPHANS_INTERVAL_S (scrapejobs/celery.py).
@shared_task(
    name="apps.batches.tasks.batches_orphans_remove", queue="control", soft_time_limit=300, time_limit=330
)
def batches_orphans_remove_task() -> list[int]:
    from apps.batches.services import batches_orphans_remove  # noqa: PLC0415 - NFR-42

    return list(batches_orphans_remove())


# Beat runs it every BATCH_CALLBACKS_INTERVAL_S (scrapejobs/celery.py). Safe to run twice at once:
# the announcement is claimed by a conditional UPDATE (apps/batches/completion.py).
@shared_task(
    name="apps.batches.tasks.batches_completion_announce", queue="control", soft_time_limit=50, time_limit=60
)
def batches_completion_announce() -> int:
    from apps.batches.completion import batches_completion_announce as announce  # noqa: PLC0415 - NFR-42

    return announce()
