"""DELETE /batches/{id} (FR-53): the batch's jobs erased in chunks by beat's task, its progress on
GET, the conditional UPDATE that records a chunk once; ``manage.py erase_tenant`` (FR-54). Jobs in
through HTTP, fetched by the worker's attempt against a local target, folded by the writer's fold."""

from __future__ import annotations

import io
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.test import Client, override_settings

from apps.batches.loader import batch_load
from apps.batches.models import Batch
from apps.batches.services import batch_erase_advance
from apps.erasure.batches import batches_erase_run
from apps.erasure.tasks import batches_erase
from apps.jobs.models import Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.results.storage import storage_files_under
from apps.scraping.attempt import job_run_attempt
from apps.tenants.models import ApiToken, Tenant
from apps.tenants.services import token_create
from scrapejobs.celery import _beat_schedule

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = "/api/v1/jobs"
BATCHES = "/api/v1/batches"


def _stored(prefix: str = "results") -> list[str]:
    return sorted(k for k in storage_files_under(prefix) if "/.spool/" not in k)


def _run(job_id) -> None:
    receipt = job_run_attempt(job_id=str(job_id), worker="w:1:1")
    if receipt is not None:
        attempts_apply_finished([receipt])


def _loaded_batch(api, target, n: int) -> tuple[str, list[Job]]:
    rows = [{"url": target.url(f"/bytes/{100 + i}")} for i in range(n)]
    r = api.post(BATCHES, rows, format="json")
    assert r.status_code == 202, r.content
    batch_id = r.json()["id"]
    assert batch_load(batch_id=uuid.UUID(batch_id)) == "loaded"
    return batch_id, list(Job.objects.filter(batch_id=batch_id).order_by("batch_row"))


@override_settings(SCRAPEJOBS_ERASURE_CHUNK_SIZE=2)
def test_a_batch_is_erased_in_chunks_with_its_progress_on_get(make_tenant, target, local_results):
    tenant, _, api = make_tenant()
    batch_id, jobs = _loaded_batch(api, target, 5)
    for job in jobs[:3]:
        _run(job.id)
    assert len(_stored()) == 3
    # A queued job: 409, nothing asked.
    r = api.delete(f"{BATCHES}/{batch_id}")
    assert r.status_code == 409 and r.json()["code"] == "batch_not_final"
    assert api.get(f"{BATCHES}/{batch_id}").json()["erasure"] is None
    # A read token may not erase.
    reader = Client(HTTP_AUTHORIZATION=f"Bearer {token_create(tenant=tenant, name='ro', scope='read')}")
    assert reader.delete(f"{BATCHES}/{batch_id}").status_code == 403
    assert api.post(f"{BATCHES}/{batch_id}/cancel").status_code == 200

    r = api.delete(f"{BATCHES}/{batch_id}")
    assert r.status_code == 202, r.content
    erasure = r.json()["erasure"]
    assert (erasure["rows_done"], erasure["progress"], erasure["finished_at"]) == (0, 0.0, None)
    assert api.delete(f"{BATCHES}/{batch_id}").json()["erasure"]["requested_at"] == erasure["requested_at"]

    seen = []
    for _ in range(4):  # one chunk per run when the budget is spent at once
        batches_erase_run(budget_s=0)
        state = api.get(f"{BATCHES}/{batch_id}").json()
        seen.append((state["erasure"]["rows_done"], state["erasure"]["finished_at"] is not None))
    assert seen == [(2, False), (4, False), (5, False), (5, True)]
    state = api.get(f"{BATCHES}/{batch_id}").json()
    assert state["erasure"]["progress"] == 1.0
    assert state["jobs"] == {"erased": 5}
    assert _stored() == []
    assert set(Job.objects.filter(batch_id=batch_id).values_list("status", "url")) == {("erased", "")}
    for job in jobs:
        assert api.get(f"{JOBS}/{job.id}").status_code == 410
    # Run again: nothing left to do, nothing changes.
    assert batches_erase()["chunks"] == 0


def test_a_chunk_is_recorded_once_whichever_runner_gets_there_first(make_tenant, target, local_results):
    _, _, api = make_tenant()
    batch_id, _ = _loaded_batch(api, target, 2)
    api.post(f"{BATCHES}/{batch_id}/cancel")
    assert api.delete(f"{BATCHES}/{batch_id}").status_code == 202
    assert batch_erase_advance(batch_id=uuid.UUID(batch_id), from_row=0, to_row=2)
    # A second runner that read the batch at row 0 records nothing.
    assert not batch_erase_advance(batch_id=uuid.UUID(batch_id), from_row=0, to_row=1)
    assert Batch.objects.get(id=batch_id).erase_after_row == 2
    batches_erase_run()  # goes on from row 2: nothing past it, so it finishes
    assert Batch.objects.get(id=batch_id).erase_finished_at is not None


def test_a_failed_batchs_parts_are_removed_by_its_erasure(make_tenant, local_results):
    _, _, api = make_tenant()
    r = api.post(BATCHES, [{"url": "http://a.example/1"}], format="json")
    batch_id = r.json()["id"]
    Batch.objects.filter(id=batch_id).update(status="failed", error="part 0 damaged")
    assert len(_stored("batches")) == 2  # a part and the manifest
    assert api.delete(f"{BATCHES}/{batch_id}").status_code == 202
    batches_erase_run()
    assert _stored("batches") == []
    assert Batch.objects.get(id=batch_id).error == ""


def test_the_beat_schedule_runs_the_batch_erasure():
    assert _beat_schedule()["batches-erase"]["task"] == batches_erase.name


def test_erase_tenant_removes_everything_of_the_tenant_and_keeps_a_body_another_tenant_was_served(
    make_tenant, target, local_results
):
    (gone, _, api), (stays, _, other) = make_tenant(name="leaving"), make_tenant()
    Tenant.objects.filter(id__in=[gone.id, stays.id]).update(share_fetches=True)
    shared = api.post(JOBS, {"url": target.url("/bytes/500"), "max_age_s": 600}, format="json").json()["id"]
    _run(shared)
    own = api.post(JOBS, {"url": target.url("/bytes/200")}, format="json").json()["id"]
    _run(own)
    served = other.post(JOBS, {"url": target.url("/bytes/500"), "max_age_s": 600}, format="json").json()["id"]
    _run(served)
    assert Job.objects.get(id=served).result_key == Job.objects.get(id=shared).result_key
    queued = api.post(JOBS, {"url": "http://a.example/later"}, format="json").json()["id"]
    batch = api.post(BATCHES, [{"url": "http://a.example/b"}], format="json").json()["id"]
    assert len(_stored("batches")) == 2

    with pytest.raises(CommandError, match="add --yes"):
        call_command("erase_tenant", "leaving")
    with pytest.raises(CommandError, match="1 queued or running"):
        call_command("erase_tenant", "leaving", "--yes")
    api.post(f"{JOBS}/{queued}/cancel")
    out = io.StringIO()
    call_command("erase_tenant", str(gone.id), "--yes", stdout=out)

    printed = out.getvalue()
    assert f"erased tenant leaving ({gone.id})" in printed
    assert "  jobs: 3" in printed and "  batches: 1" in printed and "  batch objects: 2" in printed
    assert "  objects kept shared: 2" in printed and "  tokens: 1" in printed
    assert not Tenant.objects.filter(id=gone.id).exists()
    assert not Job.objects.filter(tenant_id=gone.id).exists()
    assert not ApiToken.objects.filter(tenant_id=gone.id).exists()
    assert not Batch.objects.filter(id=batch).exists()
    assert _stored("batches") == []
    assert _stored() == [Job.objects.get(id=served).result_key]  # the other tenant's served copy
    link = other.get(f"{JOBS}/{served}/result").json()["url"]
    response = Client().get(link)
    assert response.status_code == 200 and len(b"".join(response.streaming_content)) == 500
    assert api.get(JOBS).status_code == 401  # its token is gone
    assert Job.objects.get(id=served).status == JobStatus.SUCCEEDED
