"""Erasure's periodic task. Thin: it calls one service."""

from __future__ import annotations

from celery import shared_task


# Beat runs it every ERASURE_INTERVAL_S on `control` (scrapejobs/celery.py). Safe to run twice at
# once: the second finds the first's lock and does nothing; a chunk is recorded by a conditional
# UPDATE.
@shared_task(name="apps.erasure.tasks.batches_erase", queue="control", soft_time_limit=80, time_limit=90)
def batches_erase() -> dict[str, int | bool]:
    # Batch erasure goes through apps/batches/services.py (pyarrow, DRF's serializers): imported
    # only by a run that has a batch to erase. Nearly every run has none, and asking is one light
    # read; a control process that imported pyarrow and numpy on every run carried both from its
    # tenth second on (NFR-42).
    from apps.batches.selectors import batches_erase_pending  # noqa: PLC0415 - see above

    if not batches_erase_pending(limit=1):
        return {"batches_finished": 0, "jobs_erased": 0, "chunks": 0, "stuck": 0, "busy": False}
    from apps.erasure.batches import batches_erase_run  # noqa: PLC0415 - see above

    stats = batches_erase_run(budget_s=50.0)
    return {
        "batches_finished": stats.batches_finished,
        "jobs_erased": stats.jobs_erased,
        "chunks": stats.chunks,
        "stuck": stats.stuck,
        "busy": stats.busy,
    }
