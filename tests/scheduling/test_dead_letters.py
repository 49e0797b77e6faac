"""Dead letters in the admin (FR-8), through the Django test client as a superuser."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from apps.jobs.claims import job_claim
from apps.jobs.models import Attempt, Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.jobs.receipts import AttemptFinished
from apps.scheduling.services import dead_letters_discard, dead_letters_requeue
from tests.scheduling.factories import queued_job

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:scheduling_deadletter_changelist"
GROUPED = "admin:scheduling_deadletter_grouped"


@pytest.fixture
def admin_client() -> Client:
    user = get_user_model().objects.create_superuser("ops", "ops@example.test", "pw")
    client = Client()
    client.force_login(user)
    return client


def failed_job(tenant, *, domain="api.example.test", http_status=401, error_class=None, max_attempts=1):
    """A job that failed for good through the real claim and receipt path."""
    job = queued_job(tenant, url=f"https://{domain}/v1/items", domain=domain, max_attempts=max_attempts)
    for n in range(1, max_attempts + 1):
        Job.objects.filter(id=job.id).update(not_before=None)
        claimed = job_claim(job_id=job.id, worker="w@h:1:1")
        assert claimed is not None and claimed.attempt == n
        outcome = "failed_permanent" if n == max_attempts else "failed_temporary"
        receipt = AttemptFinished(
            job_id=str(job.id),
            attempt=n,
            outcome=outcome,
            finished_at=1.9e9 + n,
            duration_ms=12,
            http_status=http_status,
            error_class=error_class or f"http_{http_status}",
            error=f"HTTP {http_status}",
        )
        assert attempts_apply_finished([receipt]).applied == 1
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    return job


def test_the_list_shows_failed_jobs_with_their_last_error_and_not_the_others(admin_client, make_tenant):
    tenant, _, _ = make_tenant(name="acme")
    failed = failed_job(tenant, http_status=403)
    queued = queued_job(tenant)

    page = admin_client.get(reverse(CHANGELIST), {"q": ""}).content.decode()

    assert str(failed.id) in page
    assert str(queued.id) not in page
    assert "http_403" in page and "acme" in page and "api.example.test" in page


def test_a_dead_letter_page_shows_its_attempt_history(admin_client, make_tenant):
    tenant, _, _ = make_tenant()
    job = failed_job(tenant, max_attempts=3, http_status=503, error_class="http_503")

    page = admin_client.get(reverse("admin:scheduling_deadletter_change", args=[job.id])).content.decode()

    assert page.count("failed_temporary") >= 2 and "failed_permanent" in page
    assert Attempt.objects.filter(job=job).count() == 3


def test_a_hundred_jobs_to_one_domain_answering_401_are_one_row_with_a_count(admin_client, make_tenant):
    tenant, _, _ = make_tenant()
    for _ in range(100):
        failed_job(tenant, domain="api.shop.test", http_status=401)
    for _ in range(3):
        failed_job(tenant, domain="other.test", http_status=404)

    page = admin_client.get(reverse(GROUPED)).content.decode()

    rows = re.findall(r"<tr class=\"row[12]\">(.*?)</tr>", page, re.S)
    assert len(rows) == 2
    first = rows[0]
    assert "api.shop.test" in first and "http_401" in first and ">100</a>" in first
    assert "other.test" in rows[1] and ">3</a>" in rows[1]


def test_the_group_link_lists_exactly_that_groups_jobs(admin_client, make_tenant):
    tenant, _, _ = make_tenant()
    mine = [failed_job(tenant, domain="a.test", http_status=401) for _ in range(2)]
    other = failed_job(tenant, domain="a.test", http_status=404)

    page = admin_client.get(
        reverse(CHANGELIST), {"domain": "a.test", "error_class": "http_401", "http_status": "401"}
    ).content.decode()

    assert all(str(j.id) in page for j in mine)
    assert str(other.id) not in page


def test_requeue_in_bulk_gives_a_fresh_attempt_budget_and_keeps_the_history(admin_client, make_tenant):
    tenant, _, _ = make_tenant()
    jobs = [failed_job(tenant, max_attempts=2) for _ in range(3)]

    response = admin_client.post(
        reverse(CHANGELIST), {"action": "requeue", "_selected_action": [str(j.id) for j in jobs]}
    )

    assert response.status_code == 302
    for job in jobs:
        job.refresh_from_db()
        assert job.status == JobStatus.QUEUED
        assert job.attempts == 2 and job.max_attempts == 4
        assert Attempt.objects.filter(job=job).count() == 2
    assert str(jobs[0].id) not in admin_client.get(reverse(CHANGELIST), {"q": ""}).content.decode()


def test_discard_takes_a_job_off_the_list_but_leaves_it_failed(admin_client, make_tenant):
    tenant, _, _ = make_tenant()
    job, kept = failed_job(tenant), failed_job(tenant)

    admin_client.post(reverse(CHANGELIST), {"action": "discard", "_selected_action": [str(job.id)]})

    page = admin_client.get(reverse(CHANGELIST), {"q": ""}).content.decode()
    assert str(job.id) not in page and str(kept.id) in page
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED


def test_a_discarded_job_that_is_requeued_and_fails_again_is_a_dead_letter_again(make_tenant):
    from apps.scheduling.models import DeadLetter

    tenant, _, _ = make_tenant()
    job = failed_job(tenant)
    assert dead_letters_discard(job_ids=[job.id]) == 1
    assert not DeadLetter.objects.filter(id=job.id).exists()
    assert dead_letters_requeue(job_ids=[job.id]) == 1
    Job.objects.filter(id=job.id).update(not_before=None)
    claimed = job_claim(job_id=job.id, worker="w@h:1:1")
    assert claimed is not None and claimed.attempt == 2
    attempts_apply_finished(
        [
            AttemptFinished(
                job_id=str(job.id), attempt=2, outcome="failed_permanent", finished_at=2e9, duration_ms=1
            )
        ]
    )

    assert DeadLetter.objects.filter(id=job.id).exists()


def test_a_whole_group_can_be_requeued_or_discarded_from_the_grouped_page(admin_client, make_tenant):
    tenant, _, _ = make_tenant()
    expired_key = [failed_job(tenant, domain="k.test", http_status=401) for _ in range(4)]
    gone = [failed_job(tenant, domain="g.test", http_status=410) for _ in range(2)]

    admin_client.post(
        reverse(GROUPED),
        {"domain": "k.test", "error_class": "http_401", "http_status": "401", "action": "requeue"},
    )
    admin_client.post(
        reverse(GROUPED),
        {"domain": "g.test", "error_class": "http_410", "http_status": "410", "action": "discard"},
    )

    assert {Job.objects.get(id=j.id).status for j in expired_key} == {JobStatus.QUEUED}
    assert {Job.objects.get(id=j.id).status for j in gone} == {JobStatus.FAILED}
    assert "No dead letters." in admin_client.get(reverse(GROUPED)).content.decode()


def test_the_dead_letter_pages_are_for_staff_only(client, make_tenant):
    tenant, _, _ = make_tenant()
    failed_job(tenant)
    assert client.get(reverse(CHANGELIST)).status_code == 302
    assert client.get(reverse(GROUPED)).status_code == 302
