"""apps/jobs/inserts.py: the precompiled intake INSERT writes exactly the row the ORM writes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, transaction

from apps.jobs.inserts import job_insert
from apps.jobs.models import Job

pytestmark = pytest.mark.django_db


def _job(tenant, **kw) -> Job:
    return Job(
        tenant_id=tenant.id,
        url="http://bücher.example/x",
        domain="xn--bcher-kva.example",
        method="POST",
        headers={"X-A": "é", "Accept": ""},
        body="a=1",
        priority="high",
        callback_url="https://hooks.example/cb",
        max_attempts=7,
        attempt_budget=7,
        timeout_s=12,
        max_age_s=60,
        idempotency_key="k",
        idempotency_fingerprint="f" * 64,
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        **kw,
    )


def test_the_row_is_the_one_the_orm_writes(make_tenant):
    tenant, _, _ = make_tenant()
    ours = _job(tenant)
    job_insert(ours)
    other_tenant, _, _ = make_tenant()
    theirs = _job(other_tenant)
    theirs.save(force_insert=True)
    assert not ours._state.adding and ours._state.db == "default"
    columns = [
        f.attname for f in Job._meta.concrete_fields if f.attname not in ("id", "tenant_id", "updated_at")
    ]
    mine = Job.objects.filter(id=ours.id).values(*columns).get()
    orm = Job.objects.filter(id=theirs.id).values(*columns).get()
    assert mine == orm
    assert Job.objects.get(id=ours.id).updated_at is not None  # auto_now, as save() sets it


def test_a_duplicate_idempotency_key_is_an_integrity_error(make_tenant):
    tenant, _, _ = make_tenant()
    job_insert(_job(tenant))
    with pytest.raises(IntegrityError), transaction.atomic():
        job_insert(_job(tenant))
    assert Job.objects.filter(tenant_id=tenant.id).count() == 1
