"""Row factories for the writer's tests: jobs already claimed (running, attempt rows open),
created in bulk with SQL because the tests need thousands of them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection

from apps.jobs.receipts import AttemptFinished, ResultStored
from apps.tenants.services import tenant_create

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RunningJob:
    id: str
    attempt: int  # the current attempt (jobs_job.attempts)
    max_attempts: int
    cancel_requested: bool = False
    # Earlier attempts whose rows are still open (their worker's receipt never arrived).
    open_earlier: tuple[int, ...] = ()
    callback_url: str | None = None


def running_jobs_create(specs: list[RunningJob]) -> None:
    """Insert running jobs with attempt rows 1..attempt: the current one open, earlier ones
    closed as ``lost`` (as the sweeper leaves them) unless listed in ``open_earlier``."""
    tenant = tenant_create(name=f"writer-{uuid.uuid4().hex[:8]}").tenant
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO jobs_job (id, tenant_id, method, url, headers, domain, priority, timeout_s,
                                  max_age_s, max_attempts, attempt_budget, status, attempts,
                                  created_at, started_at, updated_at, lease_owner, lease_expires_at,
                                  published_at, cancel_requested_at, callback_url)
            SELECT v.id, %s, 'GET', 'http://target.test/' || v.id, '{}'::jsonb, 'target.test',
                   'normal', 30, 0, v.max_attempts, v.max_attempts, 'running', v.attempt,
                   %s, %s, %s, 'w', %s, %s, CASE WHEN v.cancel THEN %s::timestamptz END, v.callback_url
              FROM unnest(%s::uuid[], %s::int[], %s::int[], %s::bool[], %s::text[])
                   AS v(id, attempt, max_attempts, cancel, callback_url)
            """,
            [
                str(tenant.id),
                T0,
                T0,
                T0,
                T0 + timedelta(hours=1),
                T0,
                T0,
                [s.id for s in specs],
                [s.attempt for s in specs],
                [s.max_attempts for s in specs],
                [s.cancel_requested for s in specs],
                [s.callback_url for s in specs],
            ],
        )
        rows = [
            (s.id, n, n == s.attempt or n in s.open_earlier) for s in specs for n in range(1, s.attempt + 1)
        ]
        cur.execute(
            """
            INSERT INTO jobs_attempt (job_id, number, worker, started_at, finished_at, outcome)
            SELECT v.job_id, v.number, 'w', %s, CASE WHEN v.open THEN NULL ELSE %s::timestamptz END,
                   CASE WHEN v.open THEN NULL ELSE 'lost' END
              FROM unnest(%s::uuid[], %s::int[], %s::bool[]) AS v(job_id, number, open)
            """,
            [T0, T0, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]],
        )


def receipt(job_id: str, attempt: int, outcome: str = "succeeded", **kw: object) -> AttemptFinished:
    """A receipt as a worker would send it; a success carries its stored result."""
    defaults: dict[str, object] = {"finished_at": T0.timestamp() + 60 + attempt, "duration_ms": 40 + attempt}
    if outcome == "succeeded":
        defaults.update(
            http_status=200,
            result=ResultStored(
                key=f"results/{job_id}",
                size=1000 + attempt,
                sha256=uuid.UUID(job_id).hex * 2,
                content_type="text/html",
                http_status=200,
            ),
        )
    else:
        defaults.update(http_status=503, error_class="http_5xx", error=f"HTTP 503 on attempt {attempt}")
    defaults.update(kw)
    return AttemptFinished(job_id=job_id, attempt=attempt, outcome=outcome, **defaults)  # type: ignore[arg-type]


def new_id() -> str:
    return str(uuid.uuid4())
