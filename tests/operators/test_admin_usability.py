"""The admin answers "what is wrong" for a person who opens it for the first time (issue 13,
item 7). Attempts are made for real (a fetch against a local server, its receipt folded into the
ledger by the writer's code), then read through the admin pages."""

from __future__ import annotations

import re
import socket
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.jobs.claims import job_claim
from apps.jobs.intake import job_create
from apps.jobs.models import Attempt, Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.scraping.fetch_and_store import claimed_attempt_fetch_and_store
from apps.tenants.models import Tenant
from apps.tenants.services import tenant_create
from tests.support.target import TargetServer, body_for

pytestmark = pytest.mark.django_db

JOBS = "/admin/jobs/job/"
ATTEMPTS = "/admin/jobs/attempt/"
DEAD = "/admin/scheduling/deadletter/"


@pytest.fixture
def shop() -> Tenant:
    return tenant_create(name="shop").tenant


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def attempted(tenant: Tenant, url: str, *, max_attempts: int = 1) -> Job:
    """A job whose one attempt ran for real: claimed, fetched, its receipt folded in."""
    job, _ = job_create(tenant_id=tenant.pk, url=url, domain="127.0.0.1", max_attempts=max_attempts)
    claimed = job_claim(job_id=job.id, worker="worker-1@host")
    assert claimed is not None
    attempts_apply_finished([claimed_attempt_fetch_and_store(claimed=claimed, worker="worker-1@host")])
    job.refresh_from_db()
    return job


def test_the_attempts_list_shows_every_attempt_without_a_search(admin_client: Client, shop: Tenant) -> None:
    job = attempted(shop, f"http://127.0.0.1:{closed_port()}/")
    html = admin_client.get(ATTEMPTS).content.decode()
    assert f"/admin/jobs/job/{job.id}/change/" in html or str(job.id) in html
    assert "connection_error" in html and "1 attempt" in html


def test_a_search_that_is_no_job_id_says_so(admin_client: Client, shop: Tenant) -> None:
    job = attempted(shop, f"http://127.0.0.1:{closed_port()}/")
    html = admin_client.get(ATTEMPTS, {"q": "shop.example"}).content.decode()
    assert "is not a job id" in html and str(job.id) not in html


def test_a_failed_attempts_error_reads_without_internal_class_names(
    admin_client: Client, shop: Tenant
) -> None:
    port = closed_port()
    job = attempted(shop, f"http://127.0.0.1:{port}/")
    stored = Attempt.objects.get(job=job).error or ""
    assert "HTTPConnection(" in stored  # what the fetcher records, kept whole in the ledger
    for page in (ATTEMPTS, f"{JOBS}{job.id}/change/", f"{DEAD}{job.id}/change/"):
        html = admin_client.get(page).content.decode()
        assert "HTTPConnection" not in html, page
        assert f"127.0.0.1:{port}: failed to establish a new connection" in html, page


def test_the_job_page_puts_the_attempts_right_after_the_summary(admin_client: Client, shop: Tenant) -> None:
    job = attempted(shop, f"http://127.0.0.1:{closed_port()}/")
    html = admin_client.get(f"{JOBS}{job.id}/change/").content.decode()
    summary, attempts, request = html.index(">Summary<"), html.index("worker-1@host"), html.index(">Request<")
    assert summary < attempts < request


def test_the_job_page_shows_the_last_error_as_a_sentence_and_times_with_seconds(
    admin_client: Client, shop: Tenant
) -> None:
    job = attempted(shop, f"http://127.0.0.1:{closed_port()}/")
    assert job.status == JobStatus.FAILED
    html = admin_client.get(f"{JOBS}{job.id}/change/").content.decode()
    assert "connection_error: 127.0.0.1:" in html
    assert '"class"' not in html and "&quot;class&quot;" not in html  # no raw JSON
    created = job.created_at.strftime("%Y-%m-%d %H:%M:%S")
    assert created in html
    assert re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", admin_client.get(JOBS).content.decode())


def test_the_job_page_links_to_its_result(admin_client: Client, shop: Tenant, target: TargetServer) -> None:
    job = attempted(shop, target.url("/bytes/300"))
    assert job.status == JobStatus.SUCCEEDED
    html = admin_client.get(f"{JOBS}{job.id}/change/").content.decode()
    link = re.search(r'<a href="([^"]+)">open the result</a>', html)
    assert link is not None
    body = admin_client.get(link.group(1).replace("&amp;", "&"))
    assert body.status_code == 200 and b"".join(body.streaming_content) == body_for(300)  # type: ignore[attr-defined]


def test_the_dead_letters_open_on_the_grouped_view(admin_client: Client, shop: Tenant) -> None:
    port = closed_port()
    jobs = [attempted(shop, f"http://127.0.0.1:{port}/{i}") for i in range(3)]
    html = admin_client.get(DEAD).content.decode()
    assert "Dead letters by domain and last error" in html
    row = re.search(
        r"<td>127\.0\.0\.1</td>\s*<td>connection_error</td>.*?<td class=\"group-count\">(.*?)</td>",
        html,
        re.S,
    )
    assert row is not None and ">3<" in row.group(1)
    one_by_one = admin_client.get(DEAD, {"q": ""}).content.decode()
    assert all(str(j.id) in one_by_one for j in jobs)


def test_the_root_address_is_a_page_leading_to_the_docs_and_the_admin(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'href="/api/v1/docs"' in html and 'href="/admin/"' in html
    assert client.get("/api/v1/docs").status_code == 200


def test_the_grouped_view_counts_the_newest_dead_letters_and_says_so(
    admin_client: Client, shop: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("apps.scheduling.admin.GROUP_WINDOW", 2)
    old_port, new_port = closed_port(), closed_port()
    for i in range(2):
        attempted(shop, f"http://127.0.0.1:{old_port}/old{i}")
    Job.objects.update(finished_at=timezone.now() - timedelta(hours=1))
    for i in range(2):
        attempted(shop, f"http://127.0.0.1:{new_port}/new{i}")
    html = admin_client.get(DEAD).content.decode()
    assert "Counted over the newest 2 dead letters" in html
    row = re.search(r'<td class="group-count">(.*?)</td>', html, re.S)
    assert row is not None and ">2<" in row.group(1)
    assert html.count('class="group-count"') == 1
