"""Crawls through the Python client and the ``scrapejobs crawl`` command against the real service
(FR-45, docs/client.md, docs/crawls.md): a crawl of the local linked site (tests/support/target.py's
``/site``) started, followed with its progress, its pages walked by cursor, cancelled; the
command's exit codes for a completed crawl, a failed page, a cancelled crawl, a timeout and bad
input."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from scrapejobs_client import AsyncClient, BadRequest, Client, Conflict, InvalidRequest, NotFound
from warcio.archiveiterator import ArchiveIterator

from apps.crawls.models import Crawl
from apps.jobs.models import Job
from tests.clients.test_cli_e2e import cli_env, scrapejobs
from tests.support.procs import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FAST_EXPAND = {"SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S": "0.3"}


def test_a_crawl_is_started_followed_walked_and_cancelled_through_the_client(stack, target, tmp_path):
    s = stack(worker_concurrency=8, **FAST_EXPAND)
    with Client(s.base_url, s.token) as sj:
        started = sj.crawl(
            target.url("/site/0"), max_pages=100, max_depth=2, exclude=["/private*"], sitemaps="skip"
        )
        assert started.status == "running" and started.pages is not None

        seen = []
        done = sj.wait_crawl(started, timeout=120, on_progress=seen.append)

        assert done.status == "completed" and done.pages is not None
        assert (done.pages.total, done.pages.succeeded, done.pages.failed) == (7, 7, 0)
        assert seen[-1] == done and all(st.pages is not None for st in seen)
        # The progress seen never goes backwards: pages found and pages final only grow.
        totals = [st.pages.total for st in seen if st.pages]
        assert totals == sorted(totals)
        # Walked two at a time: every page once, in the order found, with its job's status.
        pages = list(sj.crawl_pages(done, limit=2))
        assert [p.seq for p in pages] == list(range(1, 8))
        assert {p.url.rsplit("/", 1)[1] for p in pages} == {str(n) for n in range(7)}
        assert {p.status for p in pages} == {"succeeded"}
        assert {p.job for p in pages} == set(
            str(i) for i in Job.objects.filter(batch_id=done.id).values_list("id", flat=True)
        )
        assert done.id in [c.id for c in sj.crawls(limit=1)]
        # The crawl's WARC (docs/crawls.md): a warcinfo record, then a response per page.
        written = sj.crawl_warc(done, tmp_path / "crawl.warc.gz")
        with (tmp_path / "crawl.warc.gz").open("rb") as f:
            records = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI")) for r in ArchiveIterator(f)]
        assert written == (tmp_path / "crawl.warc.gz").stat().st_size
        assert [kind for kind, _ in records] == ["warcinfo"] + ["response"] * 7
        assert sorted(uri for _, uri in records[1:]) == sorted(p.url for p in pages)
        with pytest.raises(NotFound):
            sj.crawl_warc("00000000-0000-0000-0000-000000000000", tmp_path / "none.warc.gz")
        assert not (tmp_path / "none.warc.gz").exists()
        with pytest.raises(Conflict):
            sj.cancel_crawl(done)

        # One page at a time, each answering after 2 s: the crawl is still running when cancelled.
        slow = sj.crawl([target.url("/site/0?delay=2")], max_pages=31, exclude=["/private*"])
        cancelled = sj.cancel_crawl(slow.id)
        assert cancelled.status == "cancelled"
        assert sj.wait_crawl(slow.id, timeout=5).status == "cancelled"
        assert Crawl.objects.get(id=slow.id).pages < 31

        with pytest.raises(InvalidRequest) as refused:
            sj.crawl("ftp://example.com/", max_pages=5, depth=3)
        assert set(refused.value.fields) == {"seeds", "depth"}  # refused before sending
        with pytest.raises(BadRequest) as bad:
            sj.crawl(target.url("/site/0"), max_pages=5, scope="same_origin", include=["no-slash"])
        assert "include" in bad.value.fields
        with pytest.raises(NotFound):
            sj.get_crawl("00000000-0000-0000-0000-000000000000")
    assert Crawl.objects.filter(tenant=s.tenant).count() == 2  # the refused ones created nothing


def test_the_async_client_crawls_and_walks_the_pages(stack, target, tmp_path):
    s = stack(worker_concurrency=4, **FAST_EXPAND)

    async def run() -> None:
        async with AsyncClient(s.base_url, s.token) as sj:
            started = await sj.crawl(target.url("/site/0"), max_pages=3, max_depth=5, sitemaps="skip")
            seen: list = []
            done = await sj.wait_crawl(started, timeout=120, on_progress=seen.append)
            assert done.status == "completed" and done.pages and done.pages.succeeded == 3
            assert seen and seen[-1].status == "completed"
            pages = [p async for p in sj.crawl_pages(started.id, limit=1)]
            assert [p.seq for p in pages] == [1, 2, 3]
            assert (await sj.get_crawl(started)).pages == done.pages
            assert await sj.crawl_warc(started, tmp_path / "a.warc.gz") > 0
            with (tmp_path / "a.warc.gz").open("rb") as f:
                assert [r.rec_type for r in ArchiveIterator(f)] == ["warcinfo"] + ["response"] * 3

    asyncio.run(run())


def test_the_crawl_command_exits_as_the_batch_command_does(stack, target):
    s = stack(worker_concurrency=4, **FAST_EXPAND)
    env = cli_env(s)

    ok = scrapejobs(env, "crawl", target.url("/site/0"), "--max-pages", "5", "--max-depth", "1", "--wait")
    assert ok.returncode == 0, ok.stderr
    assert (
        "completed" in ok.stdout and "total 4  succeeded 4  failed 0  cancelled 0" in ok.stdout
    )  # 0, 1, 2, /private/0
    assert "pages done / found" in ok.stderr  # the progress bar

    failed = scrapejobs(
        env,
        "--json",
        "crawl",
        target.url("/site/0"),
        target.url("/status/404"),
        "--max-pages",
        "2",
        "--max-depth",
        "0",
        "--max-attempts",
        "1",
        "--wait",
    )
    assert failed.returncode == 1, failed.stderr
    body = json.loads(failed.stdout)
    assert body["status"] == "completed" and body["pages"]["failed"] == 1

    started = scrapejobs(env, "--json", "crawl", target.url("/site/0?delay=2"), "--max-pages", "31")
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["status"] == "running"  # without --wait: answered at once
    timed_out = scrapejobs(
        env, "crawl", target.url("/site/0?delay=2&n=7"), "--max-pages", "7", "--wait", "--timeout", "1"
    )
    assert timed_out.returncode == 4, timed_out.stderr

    waiting = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scrapejobs_client.cli",
            "crawl",
            target.url("/site/0?delay=3&n=9"),
            "--max-pages",
            "9",
            "--wait",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(
        lambda: Crawl.objects.filter(seeds__contains=[target.url("/site/0?delay=3&n=9")]).exists(),
        30,
        interval=0.1,
        what="the waited-for crawl to be created",
    )
    waited = Crawl.objects.get(seeds__contains=[target.url("/site/0?delay=3&n=9")])
    with Client(s.base_url, s.token) as sj:
        assert sj.cancel_crawl(str(waited.id)).status == "cancelled"
    assert waiting.wait(60) == 3, waiting.stderr.read()

    assert scrapejobs(env, "crawl", "ftp://example.com/", "--max-pages", "5").returncode == 2
    assert scrapejobs(env, "crawl", target.url("/site/0"), "--max-pages", "0").returncode == 2
    assert scrapejobs(env, "crawl", target.url("/site/0")).returncode == 2  # --max-pages is required
    assert scrapejobs(env, "crawl", "--max-pages", "5").returncode == 2  # no seed
    above_cap = scrapejobs(env, "crawl", target.url("/site/0"), "--max-pages", "10001")
    assert above_cap.returncode == 5 and "max_pages" in above_cap.stderr  # the API's 400
    assert Crawl.objects.filter(tenant=s.tenant).count() == 5  # the refused ones created nothing
