"""Result storage and signed links, on local files and on S3 (moto in server mode, over HTTP)."""

import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid

import boto3
import pytest
from django.conf import settings
from django.core.files.storage import storages
from django.test import Client, override_settings

from apps.jobs.ids import uuid7
from apps.jobs.models import Job
from apps.results.links import link_token_make
from apps.results.selectors import ResultGone, result_link
from apps.results.storage import ResultStoreFailed, result_key, result_store, results_storage
from apps.scraping.errors import FetchError
from tests.support.procs import ROOT
from tests.support.target import body_for


def _chunks(data: bytes, size: int = 65536):
    for i in range(0, len(data), size):
        yield data[i : i + size]


def _succeeded_job(tenant, stored, content_type="text/plain") -> Job:
    return Job.objects.create(
        tenant=tenant,
        url="http://example.test/",
        domain="example.test",
        status="succeeded",
        created_at="2026-01-01T00:00:00Z",
        result_key=stored.key,
        result_size=stored.size,
        result_sha256=stored.sha256,
        result_content_type=content_type,
    )


def test_the_key_names_the_attempt_and_neither_the_job_nor_its_day():
    job_id = uuid7()
    key = result_key(job_id=job_id, attempt=3)
    prefix, shard, file_name = key.split("/")
    name, attempt = file_name.split(".")
    assert (prefix, attempt, shard) == ("results", "3", name[:2])
    assert len(name) == 32 and str(job_id) not in key and job_id.hex not in key
    assert time.strftime("%Y", time.gmtime()) not in key.replace(name, "")
    assert result_key(job_id=job_id, attempt=3) == key  # a retried store lands on the same key
    assert result_key(job_id=uuid7(), attempt=3) != key


def test_a_stored_body_records_its_size_and_sha256(local_results):
    data = body_for(200_000)
    stored = result_store(
        job_id=uuid7(), attempt=1, chunks=_chunks(data), content_type="text/html", http_status=200
    )
    assert stored.size == len(data) and stored.sha256 == hashlib.sha256(data).hexdigest()
    assert (local_results / stored.key).read_bytes() == data
    assert not any((local_results / ".spool").iterdir())  # moved into place, nothing left over


@pytest.mark.parametrize(
    ("umask", "permissions", "chmods"),
    [(0o022, 0o644, 0), (0o077, 0o644, 1), (0o022, 0o640, 0), (0o002, 0o664, 0), (0o022, 0o664, 1)],
)
def test_a_stored_body_has_the_configured_mode_whatever_the_umask(
    local_results, monkeypatch, umask, permissions, chmods
):
    # The spool file is created with FILE_UPLOAD_PERMISSIONS: the chmod after the rename (a system
    # call per job, NFR-11) is made only where the process's umask takes something from it.
    from apps.results import storage as storage_module

    chmodded = []
    chmod = os.chmod
    monkeypatch.setattr(
        storage_module.os, "chmod", lambda path, mode: (chmodded.append(mode), chmod(path, mode))
    )
    monkeypatch.setattr(storage_module, "_umask", [])  # read again under this test's umask
    previous = os.umask(umask)
    try:
        with override_settings(FILE_UPLOAD_PERMISSIONS=permissions):
            storages._storages.pop("results", None)  # made again with the setting
            stored = result_store(job_id=uuid7(), attempt=1, chunks=[b"body"])
            assert results_storage().file_permissions_mode == permissions
    finally:
        os.umask(previous)
        storages._storages.pop("results", None)
    assert os.stat(local_results / stored.key).st_mode & 0o777 == permissions
    assert chmodded == [permissions] * chmods


def test_storing_the_same_attempt_again_overwrites_it(local_results):
    job_id = uuid7()
    first = result_store(job_id=job_id, attempt=1, chunks=[b"old body"])
    second = result_store(job_id=job_id, attempt=1, chunks=[b"new"])
    assert first.key == second.key
    assert (local_results / second.key).read_bytes() == b"new"


def test_a_fetch_that_fails_mid_body_stores_nothing(local_results):
    def broken():
        yield b"partial"
        raise FetchError("body_too_large", "too big", permanent=True)

    job_id = uuid7()
    with pytest.raises(FetchError):
        result_store(job_id=job_id, attempt=1, chunks=broken())
    assert not (local_results / result_key(job_id=job_id, attempt=1)).exists()
    assert not any((local_results / ".spool").iterdir())


def test_a_storage_that_cannot_be_written_is_a_store_failure(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    backend = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(blocker)},
    }
    with (
        override_settings(STORAGES={**settings.STORAGES, "default": backend, "results": backend}),
        pytest.raises(ResultStoreFailed),
    ):
        result_store(job_id=uuid7(), attempt=1, chunks=[b"body"])


# --- Local signed links --------------------------------------------------------------------


@pytest.mark.django_db
def test_a_local_link_downloads_the_exact_body_without_an_api_token(local_results, make_tenant):
    tenant, _, _ = make_tenant()
    data = body_for(150_000)
    job = _succeeded_job(tenant, result_store(job_id=uuid7(), attempt=1, chunks=_chunks(data)), "text/html")
    link = result_link(job=job, ttl_s=60)
    assert link.url.startswith("/results/")
    # time is the subject: a link's lifetime: the 60 s asked for, less the test's own run
    assert 55 <= (link.expires_at.timestamp() - time.time()) <= 61
    response = Client().get(link.url)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == data
    assert response["Content-Type"] == "text/html"
    assert response["Content-Disposition"] == "attachment"  # never rendered in our origin


@pytest.mark.django_db
def test_a_link_is_absolute_from_the_request_or_the_public_base_url(local_results, make_tenant, rf):
    tenant, _, _ = make_tenant()
    job = _succeeded_job(tenant, result_store(job_id=uuid7(), attempt=1, chunks=[b"x"]))
    assert result_link(job=job, request=rf.get("/", HTTP_HOST="localhost:8000")).url.startswith(
        "http://localhost:8000/results/"
    )
    with override_settings(PUBLIC_BASE_URL="https://jobs.example"):
        assert result_link(job=job).url.startswith("https://jobs.example/results/")


@pytest.mark.django_db
def test_a_tampered_or_expired_link_is_refused(local_results, make_tenant):
    tenant, _, _ = make_tenant()
    stored = result_store(job_id=uuid7(), attempt=1, chunks=[b"secret"])
    good = result_link(job=_succeeded_job(tenant, stored)).url
    token = good.rsplit("/", 1)[1]
    tampered = token[:-2] + ("AA" if token[-2:] != "AA" else "BB")
    assert Client().get(f"/results/{tampered}").status_code == 404
    expired = link_token_make(key=stored.key, content_type=None, expires_at=time.time() - 1)
    response = Client().get(f"/results/{expired}")
    assert response.status_code == 403 and response.json()["code"] == "link_expired"


@pytest.mark.django_db
def test_a_removed_result_is_gone(local_results, make_tenant):
    tenant, _, _ = make_tenant()
    stored = result_store(job_id=uuid7(), attempt=1, chunks=[b"x"])
    job = _succeeded_job(tenant, stored)
    url = result_link(job=job).url
    (local_results / stored.key).unlink()
    with pytest.raises(ResultGone):
        result_link(job=job)
    assert Client().get(url).status_code == 404
    job.result_key = None
    with pytest.raises(ResultGone):
        result_link(job=job)


# --- S3 (moto server over HTTP) ------------------------------------------------------------


def _s3_backend_from_settings(*, endpoint: str, bucket: str) -> dict:
    """STORAGES["results"] exactly as settings/base.py builds it for SCRAPEJOBS_STORAGE=s3 (in a
    fresh interpreter, since settings are read from the environment once)."""
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="settings.test",
        SCRAPEJOBS_STORAGE="s3",
        SCRAPEJOBS_S3_BUCKET=bucket,
        SCRAPEJOBS_S3_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
    )
    code = "import json, django; django.setup(); from django.conf import settings; print(json.dumps(settings.STORAGES['results']))"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    backend = json.loads(out.stdout.strip().splitlines()[-1])
    assert backend["BACKEND"] == "apps.results.s3.ResultsS3Storage"
    return backend


@pytest.fixture
def s3_results():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    bucket = f"results-{uuid.uuid4().hex[:8]}"
    creds = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}
    boto3.client("s3", endpoint_url=endpoint, **creds).create_bucket(Bucket=bucket)
    backend = _s3_backend_from_settings(endpoint=endpoint, bucket=bucket)
    try:
        with override_settings(STORAGES={**settings.STORAGES, "default": backend, "results": backend}):
            assert type(storages["results"]).__name__ == "ResultsS3Storage"
            yield boto3.client("s3", endpoint_url=endpoint, **creds), bucket
    finally:
        server.stop()


@pytest.mark.django_db
def test_an_s3_result_downloads_through_a_presigned_link(s3_results, make_tenant):
    client, bucket = s3_results
    tenant, _, _ = make_tenant()
    data = body_for(300_000)
    stored = result_store(job_id=uuid7(), attempt=2, chunks=_chunks(data), content_type="application/json")
    head = client.head_object(Bucket=bucket, Key=stored.key)
    assert head["ContentLength"] == len(data) and head["ContentType"] == "application/json"
    link = result_link(job=_succeeded_job(tenant, stored), ttl_s=120)
    assert "X-Amz-Signature=" in link.url and "X-Amz-Expires=120" in link.url and f"/{bucket}/" in link.url
    with urllib.request.urlopen(link.url, timeout=10) as response:
        assert response.read() == data
        # Never rendered inline under the bucket's origin, as local links.
        assert response.headers["Content-Disposition"] == "attachment"
    client.delete_object(Bucket=bucket, Key=stored.key)
    with pytest.raises(ResultGone):
        result_link(job=_succeeded_job(tenant, stored))


def test_a_body_is_one_file_in_its_shard_and_no_directory_of_its_own(local_results):
    """A result is ``<prefix>/<nn>/<name>.<attempt>``: storing it makes one file (the spool file,
    renamed) and no directory of the job's, which was a second inode per result and stayed
    behind, empty, when retention deleted the body. A shard directory removed meanwhile (an
    operator's clean-up) is made again."""
    import shutil

    job_id = uuid7()
    first = result_store(job_id=job_id, attempt=1, chunks=[b"one"])
    second = result_store(job_id=job_id, attempt=2, chunks=[b"two"])
    assert first.key.rsplit("/", 1)[0] == second.key.rsplit("/", 1)[0]  # the same shard, side by side
    shard = local_results / first.key.rsplit("/", 1)[0]
    assert shard.parent == local_results / "results" and len(shard.name) == 2
    assert sorted(p.name for p in shard.iterdir()) == sorted(
        k.rsplit("/", 1)[1] for k in (first.key, second.key)
    )
    assert all(p.is_file() for p in shard.iterdir())
    shutil.rmtree(shard)
    third = result_store(job_id=job_id, attempt=3, chunks=[b"three"])
    with results_storage().open(third.key, "rb") as fh:
        assert fh.read() == b"three"


def test_a_spool_directory_removed_under_a_running_process_is_made_again(local_results):
    # The spool directory is made once per process; an operator's clean-up that
    # removes it must not make every later store fail.
    import shutil

    first = result_store(job_id=uuid7(), attempt=1, chunks=[b"one"])
    shutil.rmtree(local_results / ".spool")
    second = result_store(job_id=uuid7(), attempt=1, chunks=[b"two"])
    with results_storage().open(first.key, "rb") as a, results_storage().open(second.key, "rb") as b:
        assert (a.read(), b.read()) == (b"one", b"two")
