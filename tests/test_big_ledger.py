"""The big-ledger builder (tests/support/big_ledger.py) writes rows the service itself can read:
the scale tests and benchmarks of issue 13 rest on it."""

from __future__ import annotations

import pytest

from apps.jobs.models import Attempt, Job
from tests.support.big_ledger import ERROR_CLASSES, ledger_build, ledger_counts


@pytest.mark.django_db
def test_the_ledger_has_the_rows_it_says_and_the_orm_reads_them() -> None:
    built = ledger_build(jobs=3_000, attempts_per_job=3, tenants=3, domains=20)

    assert ledger_counts() == (built.jobs, built.attempts)
    assert built.jobs == 3_000
    statuses = set(Job.objects.values_list("status", flat=True).distinct())
    assert {"succeeded", "failed", "cancelled"} <= statuses
    # Every final job has its full count of attempts, numbered 1..n, the last one saying how it ended.
    failed = Job.objects.filter(status="failed").first()
    assert failed is not None and failed.attempts == 3
    assert failed.last_error is not None and failed.last_error["class"] in ERROR_CLASSES
    numbers = list(Attempt.objects.filter(job=failed).values_list("number", "outcome"))
    assert numbers == [(1, "failed_temporary"), (2, "failed_temporary"), (3, "failed_permanent")]
    # Ids are time-ordered like the service's own: newest id, newest created_at.
    newest = Job.objects.order_by("-id").first()
    assert newest is not None and newest.created_at == Job.objects.order_by("-created_at")[0].created_at
    assert Job.objects.filter(tenant_id=built.tenant_ids[0]).count() == 1_000
