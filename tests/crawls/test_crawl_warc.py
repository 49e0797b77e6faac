"""The WARC export's records from rows and stored bodies (FR-47, docs/crawls.md), through the
management command: a page with a stored body is a response record rebuilt from it, a failed one
and one whose stored body is not what was recorded are left out, and ``warcio check`` passes.
The export of a crawl run through the real processes is tests/crawls/test_crawl_warc_e2e.py."""

from __future__ import annotations

import gzip
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from warcio.archiveiterator import ArchiveIterator

from apps.crawls.models import Crawl
from apps.crawls.services import crawl_create
from apps.jobs.models import Job
from apps.results.storage import result_store
from apps.tenants.services import tenant_create

pytestmark = pytest.mark.django_db

WARCIO = str(Path(sys.executable).parent / "warcio")


def _crawl() -> Crawl:
    tenant = tenant_create(name="shop").tenant
    crawl, _ = crawl_create(
        tenant_id=tenant.id,
        seeds=["https://shop.example/a", "https://shop.example/b", "https://shop.example/c"],
        scope="same_origin",
        include=[],
        exclude=[],
        max_pages=5,
        max_depth=1,
        job_options={},
        callback_url=None,
        idempotency_key=None,
        fingerprint="f",
    )
    return crawl


def _succeed(job: Job, body: bytes, headers: dict[str, str], *, sha256: str | None = None) -> None:
    stored = result_store(job_id=job.id, attempt=1, chunks=[body], content_type="text/html")
    Job.objects.filter(id=job.id).update(
        status="succeeded",
        attempts=1,
        result_key=stored.key,
        result_size=stored.size,
        result_sha256=sha256 or stored.sha256,
        result_content_type="text/html",
        result_http_status=203,
        result_headers=headers,
        result_stored_at=timezone.now(),
        finished_at=timezone.now(),
    )


def test_the_command_writes_a_response_per_stored_page_with_its_headers_rewritten_to_the_stored_body(
    tmp_path,
):
    crawl = _crawl()
    a, b, c = (Job.objects.get(batch_id=crawl.id, url=f"https://shop.example/{n}") for n in "abc")
    body = "<p>d\u00e9j\u00e0 vu</p>".encode()
    # As a gzipping target's answer is kept: the encoding and the wire length, the body decoded.
    _succeed(
        a, body, {"content-type": "text/html", "content-encoding": "gzip", "content-length": "7", "x-a": "1"}
    )
    _succeed(b, b"tampered", {}, sha256=hashlib.sha256(b"original").hexdigest())
    Job.objects.filter(id=c.id).update(status="failed", finished_at=timezone.now())
    out = tmp_path / "crawl.warc.gz"

    call_command("export_crawl_warc", str(crawl.id), str(out))

    assert not (tmp_path / "crawl.warc.gz.part").exists()
    check = subprocess.run([WARCIO, "check", str(out)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    with out.open("rb") as f:
        records = [
            (r.rec_type, r.rec_headers, r.http_headers, r.content_stream().read()) for r in ArchiveIterator(f)
        ]
    assert [r[0] for r in records] == ["warcinfo", "response"]
    _, warc, http, got = records[1]
    assert warc.get_header("WARC-Target-URI") == "https://shop.example/a" and got == body
    assert http.statusline == "203 Non-Authoritative Information" and http.protocol == "HTTP/1.1"
    assert http.get_header("Content-Encoding") is None and http.get_header("Content-Length") == str(len(body))
    assert http.get_header("x-a") == "1" and http.get_header("content-type") == "text/html"
    assert gzip.decompress(out.read_bytes()).startswith(b"WARC/1.1\r\n")


def test_an_unknown_crawl_is_refused_and_writes_nothing(tmp_path):
    with pytest.raises(CommandError, match="no crawl"):
        call_command("export_crawl_warc", "00000000-0000-0000-0000-000000000000", str(tmp_path / "x.warc.gz"))
    with pytest.raises(CommandError, match="no crawl"):
        call_command("export_crawl_warc", "not-an-id", str(tmp_path / "x.warc.gz"))
    assert list(tmp_path.iterdir()) == []
