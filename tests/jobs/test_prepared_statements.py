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
