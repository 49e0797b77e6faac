"""An S3 endpoint that goes silent, resets uploads mid-stream or trickles hangs no process and marks
no job succeeded without its body (NFR-37, NFR-38, NFR-4; docs/settings.md, "Storage").

The result storage is S3 (moto in server mode, on loopback); the worker reaches it through a
loopback TCP proxy (tests/support/tcp_proxy.py), control and beat directly. While jobs fetch, the
proxy misbehaves for a few leases while their bodies are uploaded, then forwards again
(tests/e2e/proxy_faults.py checks every job, every process and the time to recover). An upload that
fails, by the S3 client's timeouts and bounded retries (SCRAPEJOBS_S3_*) or by the attempt's
deadline (SCRAPEJOBS_STORAGE_ALLOWANCE_S), ends its attempt as a temporary `storage_error`, and the
job is tried again. Every succeeded job's object is then read back from the bucket: its size and
SHA-256 are the ledger's, and the body is the target's.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from apps.jobs.models import Attempt, Job
from tests.e2e.fault_support import FAST, fast_env
from tests.e2e.proxy_faults import Fault, Run, black_hole, jobs_through_a_fault, reset_after, thin_pipe
from tests.support.target import body_for
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LEASE_S = int(FAST["SCRAPEJOBS_LEASE_S"])
# Targets answer after 0 s (stored before the fault), 4 s or 8 s (uploading during it).
DELAYS = (0, 4, 4, 8, 8)
TIMEOUT_S = 10  # each job's; its attempt's deadline is this plus the storage allowance
ALLOWANCE_S = 2
# Once the proxy forwards again: every job final within this long (a failed attempt's backoff, at
# most SCRAPEJOBS_RETRY_CAP_S, then its target's delay and the upload) ...
RECOVERY_BOUND_S = 40.0
# ... and a job submitted then (its target answers at once) succeeds within this long.
FRESH_JOB_BOUND_S = 20.0
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


@pytest.fixture
def s3() -> Iterator[tuple[Any, str, str]]:
    """A moto S3 server on loopback with one bucket: (client, endpoint, bucket)."""
    from moto.server import ThreadedMotoServer  # noqa: PLC0415 - only these tests start one

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        bucket = f"results-{uuid.uuid4().hex[:8]}"
        client = boto3.client("s3", endpoint_url=endpoint, **CREDENTIALS)
        client.create_bucket(Bucket=bucket)
        yield client, endpoint, bucket
    finally:
        server.stop()


def _through_the_proxy(
    fault: Fault,
    s3: tuple[Any, str, str],
    services: Any,
    make_tenant: Any,
    target: Any,
    tmp_path: Any,
    *,
    fault_s: float,
    body_bytes: int,
    **s3_bounds: str,
) -> Run:
    client, endpoint, bucket = s3
    host, port = endpoint.removeprefix("http://").split(":")
    proxy = TcpProxy(upstream_host=host, upstream_port=int(port)).start()
    try:
        svc = services(
            **fast_env(
                tmp_path / "results",
                SCRAPEJOBS_STORAGE="s3",
                SCRAPEJOBS_S3_BUCKET=bucket,
                SCRAPEJOBS_S3_ENDPOINT_URL=endpoint,
                AWS_ACCESS_KEY_ID=CREDENTIALS["aws_access_key_id"],
                AWS_SECRET_ACCESS_KEY=CREDENTIALS["aws_secret_access_key"],
                SCRAPEJOBS_STORAGE_ALLOWANCE_S=str(ALLOWANCE_S),
                **s3_bounds,
            )
        )
        # The worker alone stores bodies, through the proxy.
        worker_env = {"SCRAPEJOBS_S3_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"}
        run = jobs_through_a_fault(
            svc,
            make_tenant,
            target,
            proxy,
            fault=fault,
            fault_s=fault_s,
            delays=DELAYS,
            recovery_bound_s=RECOVERY_BOUND_S,
            fresh_bound_s=FRESH_JOB_BOUND_S,
            worker_env=worker_env,
            body_bytes=body_bytes,
            timeout_s=TIMEOUT_S,
            max_attempts=8,
        )
    finally:
        proxy.stop()
    _every_body_stored(client, bucket, run)
    return run


def _every_body_stored(client: Any, bucket: str, run: Run) -> None:
    """Nothing is succeeded without its body: each job's object is in the bucket, whole."""
    jobs = {j.id: j for j in Job.objects.filter(id__in=run.ids)}
    for job_id, path in zip(run.ids, run.paths, strict=True):
        job = jobs[job_id]
        expected = body_for(int(path.rsplit("/", 1)[1]))
        assert (job.result_size, job.result_sha256) == (len(expected), hashlib.sha256(expected).hexdigest())
        stored = client.get_object(Bucket=bucket, Key=job.result_key)["Body"].read()
        assert stored == expected, f"job {job_id}: {len(stored)} bytes stored under {job.result_key}"


def _storage_errors(run: Run) -> int:
    return Attempt.objects.filter(job_id__in=run.ids, error_class="storage_error").count()


def test_a_black_hole_in_front_of_s3_during_uploads_loses_no_body(
    s3, services, make_tenant, target, tmp_path
):
    """Three leases of black hole, after which the connections open during it are stranded: an
    upload into it, or later on a stranded pooled connection, times out (1 s to connect, 2 s to
    read, two tries) and its attempt is tried again."""
    run = _through_the_proxy(
        black_hole(strand=True),
        s3,
        services,
        make_tenant,
        target,
        tmp_path,
        fault_s=3 * LEASE_S,
        body_bytes=4000,
        SCRAPEJOBS_S3_CONNECT_TIMEOUT_S="1",
        SCRAPEJOBS_S3_READ_TIMEOUT_S="2",
        SCRAPEJOBS_S3_MAX_ATTEMPTS="2",
    )
    assert _storage_errors(run) >= 1


def test_uploads_reset_mid_stream_fail_as_storage_errors_and_are_retried(
    s3, services, make_tenant, target, tmp_path
):
    """Each connection is reset once it carried 8,000 bytes: every upload of a 20 kB body during the
    fault is cut in its middle, on every try."""
    run = _through_the_proxy(
        reset_after(8000),
        s3,
        services,
        make_tenant,
        target,
        tmp_path,
        fault_s=3 * LEASE_S,
        body_bytes=20_000,
        SCRAPEJOBS_S3_MAX_ATTEMPTS="2",
    )
    assert _storage_errors(run) >= 1


def test_a_pipe_slower_than_the_upload_deadline_fails_attempts_as_storage_errors(
    s3, services, make_tenant, target, tmp_path
):
    """3,000 bytes a second: a 60 kB body needs 20 s, more than any attempt has left after its fetch
    (TIMEOUT_S + ALLOWANCE_S = 12 s from its start). The read timeout (30 s) is longer: the
    attempt's deadline is what gives the upload up. Five leases, so that attempts reach their
    deadline while it lasts."""
    run = _through_the_proxy(
        thin_pipe(3000),
        s3,
        services,
        make_tenant,
        target,
        tmp_path,
        fault_s=5 * LEASE_S,
        body_bytes=60_000,
        SCRAPEJOBS_S3_READ_TIMEOUT_S="30",
    )
    given_up = Attempt.objects.filter(
        job_id__in=run.ids, error_class="storage_error", error__contains="given up"
    ).count()
    assert given_up >= 1
