"""The hot path's statements run with prepare=True are prepared once per connection, and nothing
else is (NFR-11; settings/base.py, SCRAPEJOBS_DB_PREPARED_STATEMENTS in docs/settings.md).
Django turns psycopg's preparing off, which left prepare=True doing nothing."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from apps.jobs.claims import job_claim
from apps.jobs.models import Job
from tests.support.factories import job_make
from tests.support.settings_probe import settings_run

PRINT_THRESHOLD = (
    "import json, settings.base as s; "
    "print(json.dumps(s.DATABASES['default']['OPTIONS'].get('prepare_threshold', 'absent')))"
)


def _prepared() -> list[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cur.fetchall()]


@pytest.mark.django_db
def test_the_claim_is_prepared_once_and_orm_queries_never(tenant) -> None:
    jobs = [job_make(tenant, f"http://prepared.test/{n}") for n in range(3)]
    assert _prepared() == []
    for n, job in enumerate(jobs):
        assert job_claim(job_id=job.id, worker=f"w:1:{n}") is not None
    for _ in range(10):  # far past psycopg's own threshold (5)
        Job.objects.filter(status="running").count()
    prepared = _prepared()
    assert len(prepared) == 1 and "INSERT INTO jobs_attempt" in prepared[0], prepared


def test_prepared_statements_are_on_by_default_and_can_be_turned_off() -> None:
    on = settings_run(PRINT_THRESHOLD)
    assert on.returncode == 0, on.stderr
    assert json.loads(on.stdout) == 2**31 - 1  # only prepare=True reaches it
    off = settings_run(PRINT_THRESHOLD, SCRAPEJOBS_DB_PREPARED_STATEMENTS="false")
    assert off.returncode == 0, off.stderr
    assert json.loads(off.stdout) == "absent"  # Django's default: psycopg prepares nothing


def _claim_plans() -> tuple[int, int]:
    """(generic, custom) plans the claim's prepared statement was run with on this connection."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '%INSERT INTO jobs_attempt%'"
        )
        return cur.fetchone()


@pytest.mark.django_db
def test_the_claim_is_planned_once_per_connection_not_on_every_execution(tenant, monkeypatch) -> None:
    """NFR-11 (apps/jobs/claims.py ``_planned_once``): the plan cache's own choice planned the
    claim anew each time (its generic plan is costed for arrays of a hundred jobs, its custom ones
    for the batch it gets); the first claim on a connection makes the session keep the generic
    plan, and nothing Django runs there binds parameters server-side, so nothing else is reached."""
    from apps.jobs import claims

    monkeypatch.setattr(claims, "_PLANNED_ONCE", claims.weakref.WeakSet())  # a connection not seen yet
    jobs = [job_make(tenant, f"http://planned.test/{n}") for n in range(7)]
    for n, job in enumerate(jobs):
        assert job_claim(job_id=job.id, worker=f"w:1:{n}") is not None
    generic, custom = _claim_plans()
    assert (generic, custom) == (7, 0)
    Job.objects.filter(status="running").count()  # an ORM query: bound client-side, not prepared
    assert len(_prepared()) == 1


@pytest.mark.django_db
def test_without_prepared_statements_the_claim_leaves_the_plan_cache_alone(
    tenant, monkeypatch, settings
) -> None:
    """Behind a pooler that drops prepared statements (SCRAPEJOBS_DB_PREPARED_STATEMENTS false)
    every execution is planned anyway: the session's setting is not touched."""
    from apps.jobs import claims

    monkeypatch.setattr(claims, "_PLANNED_ONCE", claims.weakref.WeakSet())
    settings.SCRAPEJOBS_DB_PREPARED_STATEMENTS = False
    assert job_claim(job_id=job_make(tenant, "http://planned.test/off").id, worker="w:1:1") is not None
    with connection.cursor() as cur:
        cur.execute("SELECT current_setting('plan_cache_mode')")
        assert cur.fetchone()[0] == "auto"
