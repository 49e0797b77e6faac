"""Retention: expired results and orphan bodies are deleted from real storage
(local files, and S3 through a moto server), their jobs answer 410 and say result_expired, each
deletion is recorded once, and job rows are pruned only by their own setting."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.files.storage import FileSystemStorage
from django.db.models import F
from django.test import override_settings
from django.utils import timezone

from apps.jobs.claims import job_claim
from apps.jobs.models import Attempt, Job
from apps.jobs.sweeping import jobs_lose_expired_leases
from apps.results.storage import (
    result_key,
    result_keys_ever,
    result_store,
    results_storage,
    storage_files_under,
)
from apps.results.storage_retention import RetentionStats, retention_run
from apps.results.tasks import retention_run_task
from scrapejobs.celery import _beat_schedule
from tests.query import helpers
from tests.results.test_storage import s3_results  # noqa: F401 - the moto S3 fixture
from tests.support.session_locks import lock_held_elsewhere

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs"


def _local_storages(location: Path, backend: str = "django.core.files.storage.FileSystemStorage") -> dict:
    results = {"BACKEND": backend, "OPTIONS": {"location": str(location), "allow_overwrite": True}}
    # staticfiles kept: WhiteNoise reads it when a test client starts and .run/static has files.
    return {**settings.STORAGES, "default": results, "results": results}


@pytest.fixture(params=["local", "s3"])
def backend(request, tmp_path):
    """The result storage under test; yields its name."""
    if request.param == "s3":
        request.getfixturevalue("s3_results")
        yield "s3"
    else:
        with override_settings(STORAGES=_local_storages(tmp_path)):
            yield "local"


def _stored_keys() -> set[str]:
    prefix = "results"
    return {k for k in storage_files_under(prefix) if "/.spool/" not in k}


def _store(job: Job, attempt: int) -> Any:
    return result_store(job_id=job.id, attempt=attempt, chunks=[f"body of {job.id}#{attempt}".encode()])


def _claim(job: Job) -> int:
    claimed = job_claim(job_id=job.id, worker="w-test")
    assert claimed is not None
    return claimed.attempt


def _succeed(job: Job) -> Job:
    """Claim, store the body as a worker does, fold the succeeded receipt."""
    attempt = _claim(job)
    return helpers.finish(job, result=_store(job, attempt), http_status=200)


def _lose_after_storing(job: Job) -> None:
    """A worker stored its body and died before its receipt: the sweeper closes the attempt as
    lost and the job waits for its retry (made due at once here)."""
    _store(job, _claim(job))
    # A day, not a second: the sweeper compares with the database's now(), which inside the
    # test's transaction is the transaction's start, seconds ago after a slow S3 upload.
    Job.objects.filter(id=job.id).update(lease_expires_at=timezone.now() - timedelta(days=1))
    assert jobs_lose_expired_leases().requeued == 1
    Job.objects.filter(id=job.id).update(not_before=None)


def _age(job: Job, *, days: float = 0, hours: float = 0, attempt: int | None = None) -> None:
    """Move a job's result (or one attempt's end) into the past."""
    ago = timedelta(days=days, hours=hours)
    if attempt is None:
        Job.objects.filter(id=job.id).update(
            finished_at=F("finished_at") - ago, result_stored_at=F("result_stored_at") - ago
        )
        Attempt.objects.filter(job_id=job.id).update(finished_at=F("finished_at") - ago)
    else:
        Attempt.objects.filter(job_id=job.id, number=attempt).update(finished_at=F("finished_at") - ago)


def _deleted_markers(job: Job) -> tuple[bool, list[tuple[int, str | None, bool]]]:
    """(the job's result marked deleted, [(attempt, outcome, body marked deleted)])."""
    fresh = Job.objects.get(id=job.id)
    attempts = [
        (a.number, a.outcome, a.body_deleted_at is not None) for a in Attempt.objects.filter(job_id=job.id)
    ]
    return fresh.result_deleted_at is not None, attempts


def test_expired_results_and_orphan_bodies_are_deleted_once_and_their_jobs_answer_410(backend, make_tenant):
    tenant, _, api = make_tenant()
    old = _succeed(helpers.queued(tenant))
    _age(old, days=31)
    fresh = _succeed(helpers.queued(tenant))
    lost_then_ok = helpers.queued(tenant)
    _lose_after_storing(lost_then_ok)
    lost_then_ok = _succeed(lost_then_ok)
    _age(lost_then_ok, hours=3, attempt=1)
    lost_recently = helpers.queued(tenant)
    _lose_after_storing(lost_recently)
    not_found = helpers.failed(tenant)
    _age(not_found, hours=3)
    late_upload = helpers.queued(tenant, max_attempts=1)
    _store(late_upload, _claim(late_upload))  # landed after the attempt gave up on it
    late_upload = helpers.finish(
        late_upload, outcome="failed_temporary", error_class="storage_error", error="slow"
    )
    _age(late_upload, hours=3)
    assert _stored_keys() == {
        result_key(job_id=old.id, attempt=1),
        result_key(job_id=fresh.id, attempt=1),
        result_key(job_id=lost_then_ok.id, attempt=1),
        result_key(job_id=lost_then_ok.id, attempt=2),
        result_key(job_id=lost_recently.id, attempt=1),
        result_key(job_id=late_upload.id, attempt=1),
    }

    assert retention_run_task() == {
        "results_deleted": 1,
        "orphans_deleted": 2,
        "jobs_pruned": 0,
        "delete_failures": 0,
        "busy": False,
    }

    # Left: the fresh result, the result that followed a lost attempt, and the body of an attempt
    # lost less than the grace period ago (its upload might still be landing).
    assert _stored_keys() == {
        result_key(job_id=fresh.id, attempt=1),
        result_key(job_id=lost_then_ok.id, attempt=2),
        result_key(job_id=lost_recently.id, attempt=1),
    }
    assert _deleted_markers(old) == (True, [(1, "succeeded", True)])
    assert _deleted_markers(fresh) == (False, [(1, "succeeded", False)])
    assert _deleted_markers(lost_then_ok) == (False, [(1, "lost", True), (2, "succeeded", False)])
    assert _deleted_markers(lost_recently) == (False, [(1, "lost", False)])
    assert _deleted_markers(not_found) == (False, [(1, "failed_permanent", False)])
    assert _deleted_markers(late_upload) == (False, [(1, "failed_temporary", True)])

    gone = api.get(f"{JOBS}/{old.id}/result")
    assert gone.status_code == 410 and gone.json()["code"] == "result_expired"
    assert api.get(f"{JOBS}/{old.id}").json()["result_expired"] is True
    for kept in (fresh, lost_then_ok):
        assert api.get(f"{JOBS}/{kept.id}/result").status_code == 200
        assert api.get(f"{JOBS}/{kept.id}").json()["result_expired"] is False
    listed = {j["id"]: j["result_expired"] for j in api.get(JOBS).json()["items"]}
    assert listed[str(old.id)] is True and listed[str(fresh.id)] is False

    # Recorded, so never picked again; job rows are kept by default.
    assert retention_run_task() == {
        "results_deleted": 0,
        "orphans_deleted": 0,
        "jobs_pruned": 0,
        "delete_failures": 0,
        "busy": False,
    }
    assert (
        Job.objects.filter(tenant=tenant).count() == 6
        and Attempt.objects.filter(job__tenant=tenant).count() == 7
    )
    assert _beat_schedule()["results-retention"]["task"] == retention_run_task.name


def test_an_expired_body_stored_in_a_directory_of_its_job_is_deleted(backend, make_tenant):
    """Bodies were stored under ``<prefix>/<nn>/<name>/<attempt>`` before the attempt became
    part of the file's name (apps/results/storage.py): such a job keeps its key, and retention
    deletes it when its result expires."""
    tenant, _, _ = make_tenant()
    job = _succeed(helpers.queued(tenant))
    now_key = result_key(job_id=job.id, attempt=1)
    before = result_keys_ever(job_id=job.id, attempt=1)[1]
    assert job.result_key == now_key and before == now_key.replace(".1", "/1")
    storage = results_storage()
    with storage.open(now_key, "rb") as fh:
        storage.save(before, fh)
    storage.delete(now_key)
    Job.objects.filter(id=job.id).update(result_key=before)
    _age(job, days=31)
    assert _stored_keys() == {before}
    assert retention_run_task()["results_deleted"] == 1
    assert _stored_keys() == set()


def test_job_rows_are_pruned_by_their_own_setting_once_nothing_of_theirs_is_stored(backend, make_tenant):
    tenant, _, api = make_tenant()
    ancient = _succeed(helpers.queued(tenant))
    _age(ancient, days=45)
    ancient_lost = helpers.queued(tenant, max_attempts=2)
    _lose_after_storing(ancient_lost)
    _claim(ancient_lost)
    ancient_lost = helpers.finish(
        ancient_lost, outcome="failed_permanent", error_class="http_404", http_status=404
    )
    _age(ancient_lost, days=45)
    month_old = _succeed(helpers.queued(tenant))
    _age(month_old, days=35)

    with override_settings(SCRAPEJOBS_JOB_RETENTION_DAYS=40):
        stats = retention_run()
    assert (stats.results_deleted, stats.orphans_deleted, stats.jobs_pruned) == (2, 1, 2)
    # The 45-day-old jobs are gone with their attempts and every object; the 35-day-old job has
    # lost its result (30 days) and keeps its row (40 days).
    assert set(Job.objects.filter(tenant=tenant).values_list("id", flat=True)) == {month_old.id}
    assert Attempt.objects.filter(job_id__in=[ancient.id, ancient_lost.id]).count() == 0
    assert _stored_keys() == set()
    assert api.get(f"{JOBS}/{ancient.id}").status_code == 404
    assert api.get(f"{JOBS}/{month_old.id}/result").status_code == 410


def test_the_result_retention_period_comes_from_its_setting(tmp_path, make_tenant):
    tenant, _, api = make_tenant()
    with override_settings(STORAGES=_local_storages(tmp_path)):
        job = _succeed(helpers.queued(tenant))
        _age(job, days=31)
        with override_settings(SCRAPEJOBS_RESULT_RETENTION_DAYS=60):
            assert retention_run().results_deleted == 0
        assert api.get(f"{JOBS}/{job.id}/result").status_code == 200
        with override_settings(SCRAPEJOBS_RESULT_RETENTION_DAYS=30):
            assert retention_run().results_deleted == 1
        assert api.get(f"{JOBS}/{job.id}/result").status_code == 410


class DeleteFails(FileSystemStorage):
    """Local files whose deletes fail (a storage that is down for deletes)."""

    def delete(self, name: str) -> None:
        raise OSError("the storage refused the delete")


def test_a_delete_that_fails_is_not_recorded_and_the_next_run_deletes_it(tmp_path, make_tenant):
    tenant, _, _ = make_tenant()
    with override_settings(STORAGES=_local_storages(tmp_path)):
        job = _succeed(helpers.queued(tenant))
        _age(job, days=31)
        key = result_key(job_id=job.id, attempt=1)
    with override_settings(STORAGES=_local_storages(tmp_path, f"{__name__}.DeleteFails")):
        stats = retention_run(budget_s=5)
        assert (stats.results_deleted, stats.delete_failures) == (0, 1)
        assert results_storage().exists(key)
    assert _deleted_markers(job) == (False, [(1, "succeeded", False)])
    with override_settings(STORAGES=_local_storages(tmp_path), SCRAPEJOBS_RETENTION_BATCH_SIZE=1):
        assert retention_run().results_deleted == 1
        assert not results_storage().exists(key)
    assert _deleted_markers(job) == (True, [(1, "succeeded", True)])


def test_each_batch_deletes_at_most_the_configured_number_and_a_run_stops_at_its_budget(
    tmp_path, make_tenant
):
    tenant, _, _ = make_tenant()
    with override_settings(STORAGES=_local_storages(tmp_path), SCRAPEJOBS_RETENTION_BATCH_SIZE=2):
        for _ in range(5):
            _age(_succeed(helpers.queued(tenant)), days=31)
        # A spent budget still runs one batch of each kind, and no more.
        assert [retention_run(budget_s=0).results_deleted for _ in range(4)] == [2, 2, 1, 0]
        # With time left a run goes on batch after batch until nothing is due.
        for _ in range(5):
            _age(_succeed(helpers.queued(tenant)), days=31)
        assert retention_run().results_deleted == 5
    assert Job.objects.filter(result_deleted_at__isnull=True).count() == 0


def test_a_pass_while_another_one_runs_does_nothing(tmp_path, make_tenant):
    tenant, _, _ = make_tenant()
    with override_settings(STORAGES=_local_storages(tmp_path)):
        job = _succeed(helpers.queued(tenant))
        _age(job, days=31)
        with lock_held_elsewhere("scrapejobs.retention"):
            assert retention_run() == RetentionStats(busy=True)
            assert retention_run_task()["busy"] is True
        assert _stored_keys() == {result_key(job_id=job.id, attempt=1)}
        assert retention_run().results_deleted == 1
