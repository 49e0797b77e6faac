"""POST /batches/{id}/cancel (FR-25): queued jobs cancelled at once, running ones asked to stop as
a job cancel does, final ones left alone; other tenants' batches are 404; a loading batch is 409."""

from __future__ import annotations

import uuid

import pytest

from apps.batches.loader import batch_load
from apps.batches.models import Batch
from apps.jobs import cancel_requeue
from apps.jobs.claims import job_claim
from apps.jobs.models import Job
from apps.redis_clients import cancel_flag_key, state_redis
from tests.batches.test_batches import _results_here, accepted, rows  # noqa: F401

pytestmark = pytest.mark.django_db


def test_a_batch_cancel_ends_queued_jobs_asks_running_ones_and_leaves_final_ones(make_tenant, monkeypatch):
    monkeypatch.setattr(cancel_requeue, "BATCH_CANCEL_CHUNK", 7)  # several chunks
    _, _, api = make_tenant()
    _, _, other = make_tenant()
    receipt = accepted(api, rows(30))
    batch_id = uuid.UUID(receipt["id"])
    assert api.post(f"/api/v1/batches/{batch_id}/cancel").status_code == 409  # not loaded yet
    assert batch_load(batch_id=batch_id) == "loaded"
    jobs = list(Job.objects.filter(batch_id=batch_id).order_by("batch_row"))
    running = job_claim(job_id=jobs[3].id, worker="w@h:1:1")
    assert running is not None
    Job.objects.filter(id=jobs[4].id).update(status="succeeded")

    assert other.post(f"/api/v1/batches/{batch_id}/cancel").status_code == 404  # another tenant's
    r = api.post(f"/api/v1/batches/{batch_id}/cancel")

    assert r.status_code == 200, r.content
    assert r.json() == {"id": str(batch_id), "cancelled": 28, "cancel_requested": 1}
    statuses = dict(Job.objects.filter(batch_id=batch_id).values_list("batch_row", "status"))
    assert statuses[4] == "running" and statuses[5] == "succeeded"
    assert {s for row, s in statuses.items() if row not in (4, 5)} == {"cancelled"}
    assert state_redis().get(cancel_flag_key(str(jobs[3].id), 1)) == "1"
    # Again: nothing queued is left; the running one is asked again.
    assert api.post(f"/api/v1/batches/{batch_id}/cancel").json()["cancelled"] == 0
    assert api.post(f"/api/v1/batches/{uuid.uuid4()}/cancel").status_code == 404
    assert Batch.objects.get(id=batch_id).status == "loaded"
