"""FR-W3 in the deployed shape: the `control` Celery process (queues control,webhooks) and beat
apply receipts with no one calling the flush by hand."""

from __future__ import annotations

import pytest

from apps.jobs.models import Attempt, Job, JobStatus
from apps.redis_clients import state_redis
from apps.writer.streams import STREAM
from apps.writer.submit import receipt_submit
from tests.support.procs import wait_for
from tests.writer.helpers import RunningJob, new_id, receipt, running_jobs_create

pytestmark = pytest.mark.e2e


def test_beat_driven_flushes_apply_receipts_in_the_writer_process(services) -> None:
    """Beat sends `apps.writer.tasks.writer_flush` every SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S; the
    writer process runs it; receipts reach the ledger and leave the stream."""
    specs = [RunningJob(id=new_id(), attempt=1, max_attempts=5) for _ in range(50)]
    running_jobs_create(specs)
    svc = services(SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S="0.5")
    svc.start("control")
    svc.start("beat")
    for s in specs:
        receipt_submit(receipt(s.id, 1))
    wait_for(
        lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 50,
        timeout=60,
        interval=0.25,
        what="the beat-driven writer to apply 50 receipts",
    )
    assert Attempt.objects.filter(outcome="succeeded").count() == 50
    wait_for(lambda: state_redis().xlen(STREAM) == 0, timeout=10, what="the stream to be acknowledged")

    # Later receipts keep flowing in (the flush is periodic, not a one-off).
    receipt_submit(receipt(specs[0].id, 1, "failed_permanent"))
    receipt_submit(receipt(new_id(), 1))
    wait_for(lambda: state_redis().xlen(STREAM) == 0, timeout=10, what="the next flush")
    assert Job.objects.get(id=specs[0].id).status == JobStatus.SUCCEEDED
