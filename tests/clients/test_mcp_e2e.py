"""``scrapejobs mcp`` against the real stack (FR-51, docs/client.md): the command is spawned as a
subprocess and spoken to over stdio by the ``mcp`` SDK's own client, as an AI assistant would."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from apps.crawls.models import Crawl
from apps.jobs.models import Job
from tests.support.target import body_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"submit_job", "submit_crawl", "crawl_pages", "wait_for_job", "read_result"}


def _server(stack, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "scrapejobs_client.cli", "mcp"],
        env={
            "SCRAPEJOBS_URL": stack.base_url,
            "SCRAPEJOBS_TOKEN": stack.token,
            "PYTHONPATH": str(ROOT / "clients" / "python" / "src"),
            **env,
        },
        cwd=str(ROOT),
    )


def _answer(result: Any) -> Any:
    """A tool's answer: its structured content when it has one, else its text."""
    assert not result.is_error, result.content
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if set(content) == {"result"} else content
    return "".join(block.text for block in result.content)


async def _session_run(params: StdioServerParameters, body) -> Any:
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)


def test_tools_list_and_a_submit_wait_result_round_trip_return_the_target_body(stack, target):
    s = stack(worker_concurrency=4)
    page = target.url("/site/0?n=1")
    binary = target.url("/bytes/300")

    async def body(session: ClientSession) -> dict[str, Any]:
        listed = await session.list_tools()
        found: dict[str, Any] = {"tools": {tool.name: tool for tool in listed.tools}}
        submitted = _answer(await session.call_tool("submit_job", {"url": page, "priority": "high"}))
        found["submitted"] = submitted
        found["waited"] = _answer(await session.call_tool("wait_for_job", {"job_id": submitted["id"]}))
        found["text"] = _answer(await session.call_tool("read_result", {"job_id": submitted["id"]}))
        small = _answer(await session.call_tool("read_result", {"job_id": submitted["id"], "max_bytes": 10}))
        found["small"] = small
        other = _answer(await session.call_tool("submit_job", {"url": binary}))
        _answer(await session.call_tool("wait_for_job", {"job_id": other["id"]}))
        found["binary"] = _answer(await session.call_tool("read_result", {"job_id": other["id"]}))
        found["missing"] = await session.call_tool(
            "wait_for_job", {"job_id": "00000000-0000-0000-0000-000000000000", "timeout_s": 1}
        )
        crawl = _answer(
            await session.call_tool("submit_crawl", {"url": page, "max_pages": 2, "max_depth": 1})
        )
        found["crawl"] = crawl
        found["crawl_pages"] = _answer(await session.call_tool("crawl_pages", {"crawl_id": crawl["id"]}))
        return found

    found = asyncio.run(_session_run(_server(s), body))

    assert set(found["tools"]) == TOOLS
    assert "100,000 bytes" in found["tools"]["read_result"].description
    job = Job.objects.get(id=found["submitted"]["id"])
    assert job.url == page and job.priority == "high" and job.tenant_id == s.tenant.pk
    assert found["waited"]["status"] == "succeeded" and found["waited"]["final"] is True
    expected = '<!doctype html><html><body><h1>site 0</h1><ul><li><a href="/site/0?n=1#top">'
    assert found["text"].startswith(expected) and found["text"].endswith("</ul></body></html>")
    assert len(found["text"].encode()) == job.result_size
    # Over the size asked for, or not text: the link, never the body.
    assert "over 10 bytes" in found["small"] and "download it from http" in found["small"]
    assert "300 bytes" in found["binary"] and "not text" in found["binary"]
    assert body_for(300).decode("latin-1") not in found["binary"]
    assert found["missing"].is_error and "404" in "".join(b.text for b in found["missing"].content)
    crawl = Crawl.objects.get(id=found["crawl"]["id"])
    assert crawl.tenant_id == s.tenant.pk and (crawl.seeds, crawl.max_pages, crawl.max_depth) == (
        [page],
        2,
        1,
    )
    assert found["crawl_pages"]["id"] == str(crawl.id)
    assert page in [p["url"] for p in found["crawl_pages"]["pages"]]


def test_the_server_refuses_to_start_without_a_token():
    env = {
        **os.environ,
        "SCRAPEJOBS_URL": "http://127.0.0.1:9",
        "PYTHONPATH": str(ROOT / "clients" / "python" / "src"),
    }
    env.pop("SCRAPEJOBS_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-m", "scrapejobs_client.cli", "mcp"],
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "token" in done.stderr
    assert json.dumps(done.stdout) == '""'  # nothing on the protocol's stream
