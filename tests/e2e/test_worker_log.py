"""The worker's log says what needs a person, not every task: Celery's two INFO lines per
task are off, while a task that fails is still logged."""

import pytest

from apps.jobs.intake import job_create
from apps.jobs.models import Job
from tests.support.procs import wait_for

pytestmark = pytest.mark.e2e


def test_a_worker_logs_no_line_per_successful_task_but_still_logs_a_crashing_one(
    services, make_tenant, target
):
    tenant = make_tenant()[0]
    s = services()
    s.start("control")
    s.start("beat")
    worker = s.start("worker", concurrency=4)
    wait_for(lambda: " ready." in worker.tail(200), 60, what="the worker")
    jobs = [
        job_create(tenant_id=tenant.id, url=target.url(f"/bytes/8?n={i}"), domain="127.0.0.1")[0]
        for i in range(5)
    ]
    wait_for(
        lambda: Job.objects.filter(id__in=[j.id for j in jobs], status="succeeded").count() == 5,
        30,
        what="the jobs",
    )
    # A message the task cannot run (a job id that is not a UUID) makes it raise.
    from scrapejobs.celery import app

    app.send_task("apps.scraping.tasks.scrape_job", args=["not-a-uuid"], queue="jobs.normal")
    wait_for(lambda: "not-a-uuid" in worker.tail(400), 30, what="the failing task's log line")
    log = worker.tail(2000)
    assert "succeeded in" not in log and "Task apps.scraping.tasks.scrape_job" in log
    assert "] received" not in log
