"""The WARC export of a crawl (FR-47, docs/crawls.md) through the real processes: a crawl of the
local linked site (tests/support/target.py's ``/site``, loopback only), one of its pages served by
single-flight from an earlier job's fetch, exported over HTTP with a ``read`` token; ``warcio
check`` passes on the file, and its records' URLs, statuses, headers and bodies are the pages'."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import requests
from warcio.archiveiterator import ArchiveIterator

from apps.jobs.models import Job
from apps.results.storage import results_storage
from apps.tenants.services import token_create
from tests.clients.conftest import free_port
from tests.support.procs import wait_for, wait_for_web

pytestmark = pytest.mark.e2e

WARCIO = str(Path(sys.executable).parent / "warcio")


def _state(api, path: str) -> dict:
    r = api.get(path)
    assert r.status_code == 200, r.content
    return r.json()


def test_a_crawls_warc_has_a_response_per_stored_page_a_revisit_for_a_served_one_and_passes_warcio_check(
    services, make_tenant, target, tmp_path
):
    svc = services(SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S="0.3").start_all(worker_concurrency=4)
    port = free_port()
    web = svc.start("web", port=port, workers=1)
    tenant, _, api = make_tenant()
    # An earlier fetch of page 3: the crawl's page 3 (max_age_s 600) is served from it.
    r = api.post("/api/v1/jobs", {"url": target.url("/site/3"), "max_age_s": 600}, format="json")
    assert r.status_code == 202, r.content
    earlier = r.json()["id"]
    wait_for(
        lambda: _state(api, f"/api/v1/jobs/{earlier}")["status"] == "succeeded", 60, what="the earlier job"
    )
    r = api.post(
        "/api/v1/crawls",
        {
            "seeds": [target.url("/site/0")],
            "max_pages": 20,
            "max_depth": 2,
            "exclude": ["/private*"],
            "job": {"max_age_s": 600},
            "sitemaps": "skip",  # the pages only: a sitemap document would be one more record
        },
        format="json",
    )
    assert r.status_code == 202, r.content
    crawl_id = r.json()["id"]
    wait_for(
        lambda: _state(api, f"/api/v1/crawls/{crawl_id}")["status"] != "running", 120, what="the crawl to end"
    )
    assert _state(api, f"/api/v1/crawls/{crawl_id}")["pages"]["succeeded"] == 7
    assert sum(1 for _, path, *_ in target.requests_for("/site/3")) == 1  # the crawl did not fetch it
    pages = {p["url"]: p for p in _state(api, f"/api/v1/crawls/{crawl_id}/pages")["items"]}
    jobs = {str(j.id): j for j in Job.objects.filter(batch_id=crawl_id)}
    # The stored headers of a page as a target sending it gzipped would leave them: the body is
    # stored decoded, so the record must not say it is encoded.
    page1 = jobs[pages[target.url("/site/1")]["job"]]
    Job.objects.filter(id=page1.id).update(
        result_headers={**(page1.result_headers or {}), "content-encoding": "gzip", "content-length": "3"}
    )

    # Over HTTP from the web process as deployed (ASGI), with a read-only token.
    wait_for_web(web, port)
    read_token = token_create(tenant=tenant, scope="read")
    path = tmp_path / "crawl.warc.gz"
    with requests.get(
        f"http://127.0.0.1:{port}/api/v1/crawls/{crawl_id}/warc",
        headers={"Authorization": f"Bearer {read_token}"},
        stream=True,
        timeout=60,
    ) as r:
        assert r.status_code == 200, r.content
        assert r.headers["Content-Type"] == "application/warc"
        assert f"crawl-{crawl_id}.warc.gz" in r.headers["Content-Disposition"]
        with path.open("wb") as out:
            for chunk in r.raw.stream(65536, decode_content=False):
                out.write(chunk)
    check = subprocess.run([WARCIO, "check", "-v", str(path)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr

    records = []
    with path.open("rb") as f:
        for rec in ArchiveIterator(f):
            body = rec.content_stream().read()
            records.append((rec.rec_type, rec.rec_headers, rec.http_headers, body))
    assert records[0][0] == "warcinfo" and crawl_id.encode() in records[0][3]
    by_uri = {h.get_header("WARC-Target-URI"): (kind, h, http, body) for kind, h, http, body in records[1:]}
    assert set(by_uri) == set(pages) and len(records) == 1 + 7
    storage = results_storage()
    for url, (kind, warc_headers, http, body) in by_uri.items():
        job = jobs[pages[url]["job"]]
        assert http.get_statuscode() == "200" and http.get_header("Content-Encoding") is None
        if url == target.url("/site/3"):
            assert kind == "revisit" and body == b""
            assert warc_headers.get_header("WARC-Refers-To-Target-URI") == target.url("/site/3")
            assert warc_headers.get_header("WARC-Profile").endswith("/revisit/identical-payload-digest")
            continue
        assert kind == "response"
        with storage.open(job.result_key, "rb") as fh:
            stored = fh.read()
        assert body == stored and b"/site/" in body
        assert http.get_header("Content-Length") == str(len(stored))
        assert http.get_header("Content-Type") == "text/html; charset=utf-8"
    # Another tenant's crawl is not found.
    assert make_tenant()[2].get(f"/api/v1/crawls/{crawl_id}/warc").status_code == 404
