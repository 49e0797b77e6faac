"""List pages that stay cheap on a ledger of millions: no page counts a whole
table, and the error-class filters offer the known classes without reading the ledger. The
timings at 1,000,000 jobs and 3,000,000 attempts are bench/admin.py's."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.jobs.intake import job_create
from apps.jobs.models import Job, JobStatus
from apps.tenants.services import tenant_create

pytestmark = pytest.mark.django_db

PAGES = (
    "/admin/jobs/job/",
    "/admin/jobs/job/?status__exact=queued",
    "/admin/jobs/attempt/",
    "/admin/jobs/attempt/?error_class=timeout",
    "/admin/scheduling/deadletter/",
    "/admin/scheduling/deadletter/?q=",
    "/admin/scheduling/deadletter/?error_class=timeout",
)


def unbounded_scans(sql: list[str]) -> list[str]:
    """Statements over jobs_job / jobs_attempt that group rows outside a key range, or count
    them without a LIMIT."""
    suspects = []
    for statement in sql:
        if not re.search(r'FROM "jobs_(job|attempt)"', statement):
            continue
        in_a_range = re.search(r'"jobs_job"\."(id|finished_at)" >= ', statement) is not None
        if "GROUP BY" in statement and not in_a_range:  # a LIMIT on groups still reads every row
            suspects.append(statement)
        elif "COUNT(" in statement and "LIMIT" not in statement and not in_a_range:
            suspects.append(statement)
    return suspects


@pytest.mark.parametrize("page", PAGES)
def test_no_admin_list_page_counts_or_groups_a_whole_table(
    admin_client: Client, page: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Samples and windows smaller than the ledger, as they are on a large one.
    monkeypatch.setattr("apps.jobs.admin._DOMAIN_SAMPLE", 2)
    monkeypatch.setattr("apps.scheduling.admin.GROUP_WINDOW", 2)
    tenant = tenant_create(name="shop").tenant
    for i in range(4):
        job, _ = job_create(tenant_id=tenant.pk, url=f"https://shop.example/{i}", domain="shop.example")
        if i % 2:
            Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, finished_at=timezone.now())
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(page).status_code == 200
    assert unbounded_scans([q["sql"] for q in queries]) == []


def test_a_list_longer_than_the_cap_counts_up_to_the_cap(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("apps.admin_mixins.COUNT_CAP", 3)
    tenant = tenant_create(name="shop").tenant
    for i in range(5):
        job_create(tenant_id=tenant.pk, url=f"https://shop.example/{i}", domain="shop.example")
    html = admin_client.get("/admin/jobs/job/").content.decode()
    assert "3 jobs" in html and "5 total" not in html


def test_the_error_class_filters_offer_the_known_classes_on_an_empty_ledger(admin_client: Client) -> None:
    for page in ("/admin/jobs/attempt/", "/admin/scheduling/deadletter/?q="):
        html = admin_client.get(page).content.decode()
        assert "?error_class=tls_error" in html and "?error_class=http_429" in html, page
