"""Hostile batch files cost a bounded amount of memory (NFR-20, docs/limits.md): each is decoded
the way POST /batches does, in a process of its own (tests/support/decode_probe.py), which
reports how much its peak resident memory grew. Before, a Parquet file's footer set how many rows
were decoded at once (65,536 rows of 8 KiB URLs: over 512 MiB before any row was checked), and a
JSON-lines file was read a whole line at a time (a 64 MiB line held, then parsed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
# Each decode is a fresh interpreter (tests/support/decode_probe.py): the whole suite's, not the
# fast loop's (as tests/test_startup_imports.py); seconds of CPU apiece by design.
pytestmark = pytest.mark.e2e

BOUND_MB = 128  # what one hostile file may add to the decoding process's peak


def _probe(fmt: str, path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.decode_probe", fmt, str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_parquet_file_of_65536_rows_of_8_kib_urls_is_decoded_a_few_mib_at_a_time(tmp_path):
    urls = pa.array([f"http://t.example/{i}/" + "a" * 8150 for i in range(65_536)])
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"url": urls}), path, compression="zstd")  # one row group
    assert path.stat().st_size < 16 << 20  # a small upload
    seen = _probe("parquet", path)
    assert seen["outcome"] == "read" and seen["rows"] == 65_536, seen
    assert seen["grown_mb"] < BOUND_MB, seen


def test_a_parquet_file_whose_rows_decode_past_the_budget_is_refused_at_the_first_batch(tmp_path):
    """A record batch's decoded size is known only once it is read: over the budget (512 rows,
    16 MiB: rows of 32 KiB on average), the file is refused there, its reason named."""
    path = tmp_path / "fat.parquet"
    urls = pa.array(["http://t.example/" + "b" * 30_000 + str(i) for i in range(1024)])
    pq.write_table(pa.table({"url": urls}), path, compression="zstd")
    seen = _probe("parquet", path)  # 512 rows of 30 KB a batch: 14.6 MiB, within the budget
    assert seen["outcome"] == "read", seen
    big = pa.array(["http://t.example/" + "c" * 35_000 + str(i) for i in range(1024)])
    pq.write_table(pa.table({"url": big}), path, compression="zstd")
    seen = _probe("parquet", path)  # 512 rows of 35 KB: 17 MiB
    assert seen["outcome"] == "UnreadableFile" and "decode to" in seen["reason"], seen
    # Not asserted here: the peak. What pyarrow holds to hand out the first record batch of a
    # row group of large values is its own (docs/limits.md gives the figure); the budget bounds
    # what comes after it.


def test_a_json_lines_file_with_a_64_mib_line_is_refused_without_reading_it_whole(tmp_path):
    path = tmp_path / "one-line.jsonl"
    with path.open("wb") as fh:
        fh.write(b'{"url": "http://t.example/"}\n')
        fh.write(b"[" + b"{}," * ((64 << 20) // 3) + b"{}]\n")
    seen = _probe("jsonl", path)
    assert seen["outcome"] == "UnreadableFile" and "JSON line over" in seen["reason"], seen
    assert seen["grown_mb"] < BOUND_MB, seen


@pytest.mark.parametrize("fmt", ["jsonl"])
def test_a_normal_json_lines_file_still_reads(tmp_path, fmt):
    path = tmp_path / "ok.jsonl"
    path.write_text("".join(json.dumps({"url": f"http://t.example/{i}"}) + "\n" for i in range(1000)))
    seen = _probe(fmt, path)
    assert (seen["outcome"], seen["rows"]) == ("read", 1000), seen
