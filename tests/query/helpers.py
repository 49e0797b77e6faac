"""Jobs in every state, made through the real jobs services (no row faking)."""

from __future__ import annotations

import time

from apps.jobs.claims import job_claim
from apps.jobs.intake import job_create
from apps.jobs.models import Job
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.jobs.receipts import AttemptFinished, ResultStored


def queued(tenant, url: str = "http://a.example/", **kw) -> Job:
    job, _ = job_create(tenant_id=tenant.id, url=url, domain="a.example", **kw)
    return job


def running(tenant, **kw) -> Job:
    job = queued(tenant, **kw)
    assert job_claim(job_id=job.id, worker="w-test") is not None
    return Job.objects.get(id=job.id)


def finish(job: Job, *, outcome: str = "succeeded", result: ResultStored | None = None, **kw) -> Job:
    current = Job.objects.get(id=job.id)
    receipt = AttemptFinished(
        job_id=str(job.id),
        attempt=current.attempts,
        outcome=outcome,
        finished_at=time.time(),
        duration_ms=12,
        result=result,
        **kw,
    )
    assert attempts_apply_finished([receipt]).applied == 1
    return Job.objects.get(id=job.id)


def succeeded(tenant, *, key: str | None = "results/x.bin", **kw) -> Job:
    result = (
        None
        if key is None
        else ResultStored(key=key, size=5, sha256="ab" * 32, content_type="text/plain", http_status=200)
    )
    return finish(running(tenant, **kw), result=result)


def failed(tenant, **kw) -> Job:
    return finish(
        running(tenant, max_attempts=1, **kw),
        outcome="failed_permanent",
        http_status=404,
        error_class="http_404",
        error="Not Found",
    )
