"""Erasure's periodic task. Thin: it calls one service."""

from __future__ import annotations

from celery import shared_task


# Beat runs it every ERASURE_INTERVAL_S on `control` (scrapejobs/celery.py). Safe to run twice at
# once: the second finds the first's lock and does nothing; a chunk is recorded by a conditional
# UPDATE.
@shared_task(name="apps.erasure.tasks.batches_erase", queue="control", soft_time_limit=80, time_limit=90)
def batches_erase() -> dict[str, int | bool]:
    # Imported by the run, not by every process that loads the tasks (NFR-42); what a run with
    # nothing to erase imports is light (apps/erasure/batches.py).
    from apps.erasure.batches import batches_erase_run  # noqa: PLC0415 - see above

    stats = batches_erase_run(budget_s=50.0)
    return {
        "batches_finished": stats.batches_finished,
        "jobs_erased": stats.jobs_erased,
        "chunks": stats.chunks,
        "stuck": stats.stuck,
        "busy": stats.busy,
    }
