"""A result storage that stalls must not keep a job `running` for ever (NFR-4;
issue 9, item 5): the upload is bounded by the job's deadline plus SCRAPEJOBS_STORAGE_ALLOWANCE_S,
and the lease keeper stops renewing a lease past that same deadline, so the sweeper takes back
a job whose worker is stuck anywhere else."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from datetime import datetime

import pytest
from django.conf import settings
from django.db import connections
from django.test import override_settings

from apps.jobs.claims import job_claim
from apps.jobs.models import Attempt, Job
from apps.scraping.attempt import job_run_attempt
from apps.scraping.leases import LeaseKeeper
from tests.e2e.fault_support import FAST, attempt_history, wait_all_final
from tests.support.factories import job_make
from tests.support.procs import ROOT, wait_for
from tests.support.target import body_for

SAVE_STALLS = "tests.support.stalling_storage.SaveStallsStorage"
OPEN_STALLS = "tests.support.stalling_storage.OpenStallsStorage"
DISK_FULL = "tests.support.stalling_storage.DiskFullStorage"


def test_the_storage_allowance_is_read_from_the_environment():
    assert settings.SCRAPEJOBS_STORAGE_ALLOWANCE_S == 60  # the default
    code = "import django; django.setup(); from django.conf import settings; print(settings.SCRAPEJOBS_STORAGE_ALLOWANCE_S)"
    env = {"DJANGO_SETTINGS_MODULE": "settings.test", "SCRAPEJOBS_STORAGE_ALLOWANCE_S": "7"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip().splitlines()[-1] == "7"
    bad = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env, "SCRAPEJOBS_STORAGE_ALLOWANCE_S": "0"},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "SCRAPEJOBS_STORAGE_ALLOWANCE_S" in bad.stderr


@pytest.mark.django_db(transaction=True)
def test_the_keeper_stops_renewing_a_lease_past_its_deadline(tenant):
    keeper = LeaseKeeper(interval_s=3600, watch_interval_s=3600)  # driven by hand below
    overdue, current = (job_make(tenant, f"http://example.test/{n}") for n in range(2))
    for job in (overdue, current):
        assert job_claim(job_id=job.id, worker="w:1:1") is not None
    before = {j.id: Job.objects.get(id=j.id).lease_expires_at for j in (overdue, current)}
    time.sleep(0.01)  # the renewal's new expiry is later than the claim's
    with (
        keeper.hold(job_id=overdue.id, attempt=1, worker="w:1:1", renew_until=time.monotonic() - 0.001),
        keeper.hold(job_id=current.id, attempt=1, worker="w:1:1", renew_until=time.monotonic() + 60),
    ):
        keeper.renew_all()
    assert Job.objects.get(id=overdue.id).lease_expires_at == before[overdue.id]
    assert Job.objects.get(id=current.id).lease_expires_at > before[current.id]


@pytest.mark.django_db(transaction=True)
def test_an_upload_that_never_ends_is_given_up_after_the_deadline_and_the_allowance(tenant, target):
    """In this process: the attempt's thread comes back with a `storage_error` receipt instead of
    waiting for the upload for ever."""
    backend = {"BACKEND": SAVE_STALLS}
    job = job_make(tenant, target.url("/bytes/10"), timeout_s=1)
    receipts: list = []

    def run() -> None:
        try:
            receipts.append(job_run_attempt(job_id=job.id, worker="w:1:1"))
        finally:
            connections.close_all()

    with override_settings(
        STORAGES={**settings.STORAGES, "results": backend}, SCRAPEJOBS_STORAGE_ALLOWANCE_S=1
    ):
        from django.core.files.storage import storages

        storages._storages.pop("results", None)  # built anew from the overridden settings
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(20)
        storages._storages.pop("results", None)
    assert not thread.is_alive(), "the attempt is still waiting for the upload"
    (receipt,) = receipts
    assert (receipt.outcome, receipt.error_class) == ("failed_temporary", "storage_error")
    assert "did not finish" in (receipt.error or "")


# --- With the real worker process ----------------------------------------------------------


@pytest.mark.e2e
def test_a_worker_whose_uploads_stall_gives_each_attempt_up_and_the_job_fails_when_attempts_run_out(
    services, tenant, target, tmp_path
):
    """One worker thread: the second attempt can only run if the first one gave its thread back."""
    services(
        **FAST,
        SCRAPEJOBS_RESULTS_DIR=str(tmp_path),
        SCRAPEJOBS_TEST_RESULTS_BACKEND=SAVE_STALLS,
        SCRAPEJOBS_STORAGE_ALLOWANCE_S="2",
    ).start_all(worker_concurrency=1)
    job = job_make(tenant, target.url("/bytes/10"), timeout_s=1, max_attempts=2)
    wait_all_final([job.id], 60, "the stalled job")
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("failed", 2)
    assert attempt_history(job) == [
        (1, "failed_temporary", "storage_error"),
        (2, "failed_temporary", "storage_error"),
    ]
    assert len(target.requests_for("/bytes/10")) == 2


@pytest.mark.e2e
def test_a_worker_stuck_before_its_upload_stops_renewing_the_lease_and_the_sweeper_takes_the_job_back(
    services, tenant, target, tmp_path
):
    """The storage never answers, not even to make its client: the upload's bound does not reach
    there. The lease is renewed until the job's deadline plus the allowance, no longer; the
    sweeper records the attempt lost and retries it (on the worker's second thread), and the job
    fails when its attempts run out."""
    lease_s, allowance_s, timeout_s = 3, 2, 1
    services(
        **{**FAST, "SCRAPEJOBS_LEASE_S": str(lease_s)},
        SCRAPEJOBS_RESULTS_DIR=str(tmp_path),
        SCRAPEJOBS_TEST_RESULTS_BACKEND=OPEN_STALLS,
        SCRAPEJOBS_STORAGE_ALLOWANCE_S=str(allowance_s),
    ).start_all(worker_concurrency=2)
    job = job_make(tenant, target.url("/bytes/10"), timeout_s=timeout_s, max_attempts=2)

    latest: dict[int, datetime] = {}  # attempt -> the latest lease expiry seen

    def watch() -> bool:
        row = Job.objects.filter(id=job.id).values("status", "attempts", "lease_expires_at").get()
        if row["status"] == "running" and row["lease_expires_at"] is not None:
            n = row["attempts"]
            latest[n] = max(latest.get(n, row["lease_expires_at"]), row["lease_expires_at"])
        return row["status"] in ("succeeded", "failed", "cancelled")

    wait_for(watch, 90, interval=0.2, what="the stuck job to be swept twice")
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("failed", 2)
    assert attempt_history(job) == [(1, "lost", "lease_expired"), (2, "lost", "lease_expired")]
    # The explicit bound of the issue: no renewal after the deadline plus the allowance (the
    # last renewal before it lasts one lease), one second for the clocks of two processes.
    for attempt in Attempt.objects.filter(job=job):
        bound = timeout_s + allowance_s + lease_s + 1
        # time is the subject: a lease's renewals stop by the deadline plus the
        # allowance and one lease (one second for two clocks)
        assert (latest[attempt.number] - attempt.started_at).total_seconds() <= bound, latest


@pytest.mark.e2e
def test_a_full_disk_fails_attempts_as_storage_errors_and_no_job_succeeds_without_its_body(
    services, tenant, target, tmp_path
):
    """The local result storage's disk is full (every save raises OSError(ENOSPC)) while the jobs
    run, then space is freed: each attempt that met the full disk failed as `storage_error` and
    was retried; a job with attempts left succeeded once the disk had room, with its body stored
    and matching its hash; a job with one attempt failed; no job is marked succeeded without its
    body on disk."""
    results = tmp_path / "results"
    full = tmp_path / "disk-full"
    full.touch()
    services(
        **FAST,
        SCRAPEJOBS_RESULTS_DIR=str(results),
        SCRAPEJOBS_TEST_RESULTS_BACKEND=DISK_FULL,
        SCRAPEJOBS_TEST_DISK_FULL_FLAG=str(full),
    ).start_all(worker_concurrency=2)
    retried = [job_make(tenant, target.url(f"/bytes/{700 + i}"), max_attempts=20) for i in range(4)]
    once = [job_make(tenant, target.url(f"/bytes/{800 + i}"), max_attempts=1) for i in range(2)]
    every = retried + once

    def each_met_the_full_disk() -> bool:
        met = set(
            Attempt.objects.filter(job__in=every, error_class="storage_error").values_list(
                "job_id", flat=True
            )
        )
        return met == {j.id for j in every}

    wait_for(each_met_the_full_disk, 90, what="an attempt of every job to meet the full disk")
    # Nothing succeeded while the disk was full.
    assert not Job.objects.filter(id__in=[j.id for j in every], status="succeeded").exists()
    full.unlink()  # space freed
    wait_all_final([j.id for j in every], 120, "the jobs after the disk had room again")

    for job in once:
        job.refresh_from_db()
        assert (job.status, job.attempts, job.result_key) == ("failed", 1, None)
        assert attempt_history(job) == [(1, "failed_temporary", "storage_error")]
    for i, job in enumerate(retried):
        job.refresh_from_db()
        history = attempt_history(job)
        assert job.status == "succeeded", history
        assert history[-1] == (job.attempts, "succeeded", None)
        assert job.attempts >= 2
        assert history[:-1] == [(n, "failed_temporary", "storage_error") for n in range(1, job.attempts)]
        body = (results / job.result_key).read_bytes()
        assert body == body_for(700 + i) and hashlib.sha256(body).hexdigest() == job.result_sha256
    assert len(target.requests_for("/bytes/")) == Attempt.objects.filter(job__in=every).count()
