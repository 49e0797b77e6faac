"""A batch upload's memory in the real web process (NFR-20, docs/limits.md): the web worker's peak
resident size (VmHWM in /proc) before and after the largest accepted JSON list of small rows,
SCRAPEJOBS_BATCH_MAX_ROWS of them. ``json.load`` of the whole list made a million dicts at once;
read row by row, in chunks, the peak stays under the bound docs/limits.md states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from tests.support.net import free_port
from tests.support.procs import wait_for, wait_for_web

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# The bound docs/limits.md states for the growth of a web process's peak memory by one upload.
PEAK_GROWTH_BOUND_MB = 256


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_the_largest_json_list_of_small_rows_stays_under_the_memory_bound(services, make_tenant):
    port = free_port()
    proc = services().start("web", port=port, workers=1)
    _, token, _ = make_tenant()
    wait_for_web(proc, port)
    (worker,) = wait_for(lambda: _children(proc.pid), what="the web worker")  # type: ignore[misc]
    rows = 1_000_000  # SCRAPEJOBS_BATCH_MAX_ROWS's default
    body = ("[" + ",".join(json.dumps({"url": f"http://t.example/{i}"}) for i in range(rows)) + "]").encode()
    assert len(body) < 256 << 20  # within SCRAPEJOBS_BATCH_MAX_BYTES's default
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    # A small batch first: what every upload needs (imports, pools, caches) is in the baseline.
    small = requests.post(
        f"http://127.0.0.1:{port}/api/v1/batches",
        data=b'[{"url": "http://t.example/"}]',
        headers=headers,
        timeout=60,
    )
    assert small.status_code == 202, small.text
    before = _peak_mb(worker)
    r = requests.post(f"http://127.0.0.1:{port}/api/v1/batches", data=body, headers=headers, timeout=300)
    after = _peak_mb(worker)
    assert r.status_code == 202, r.text[:500]
    assert (r.json()["total"], r.json()["rejected"]) == (rows, 0)
    print(
        f"\nweb worker peak: {before:.0f} MB before, {after:.0f} MB after a {len(body) >> 20} MB JSON list of {rows} rows"
    )
    assert after - before < PEAK_GROWTH_BOUND_MB, (before, after)
