"""A scrape worker's CPU priority (``SCRAPEJOBS_WORKER_NICE``, apps/runtime/priority.py,
docs/settings.md): on a machine it shares with the web, its threads run at the nice value set, so
that the intake's requests come first when the cores are busy (NFR-2); the other components keep
theirs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import wait_for
from tests.support.settings_probe import settings_run

ROOT = Path(__file__).resolve().parents[2]


def _nice_of_threads(pid: int) -> dict[int, int]:
    """Each thread's nice value (field 19 of /proc/<pid>/task/<tid>/stat)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # ended meanwhile
            continue
        out[int(tid)] = int(stat.rpartition(")")[2].split()[16])
    return out


@pytest.mark.e2e
def test_a_worker_runs_every_thread_at_the_nice_value_set_and_control_keeps_its_own(services, tmp_path):
    svc = services(SCRAPEJOBS_RESULTS_DIR=str(tmp_path / "results"), SCRAPEJOBS_WORKER_NICE="10")
    worker = svc.start("worker", concurrency=3)
    control = svc.start("control")
    for proc in (worker, control):
        wait_for(
            lambda p=proc: " ready." in p.tail(200), timeout=60, interval=0.05, what=f"{proc.name} ready"
        )
    # Threads started before the setting was applied (at worker_init) and after it (the warm-up's,
    # started at worker_ready) alike; the pool's, started with the first message, inherit it as
    # the warm-up's does (the test below).
    worker_threads = _nice_of_threads(worker.pid)
    assert len(worker_threads) > 1 and set(worker_threads.values()) == {10}, worker_threads
    assert set(_nice_of_threads(control.pid).values()) == {os.nice(0)}


def test_every_thread_is_lowered_those_started_later_inherit_it_and_none_is_raised():
    probe = """
import os, threading
from apps.runtime.priority import process_nice_set
from tests.scraping.test_worker_nice import _nice_of_threads
hold = threading.Event()
before = threading.Thread(target=hold.wait, daemon=True); before.start()
base = os.nice(0)
print(process_nice_set(base + 5) >= 2)
after = threading.Thread(target=hold.wait, daemon=True); after.start()
print(sorted(set(_nice_of_threads(os.getpid()).values())) == [base + 5])
print(process_nice_set(base + 2) == 0 and set(_nice_of_threads(os.getpid()).values()) == {base + 5})
print(process_nice_set(0) == 0)
hold.set()
"""
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True"] * 4, done.stderr


@pytest.mark.parametrize(("value", "refused"), [("0", False), ("19", False), ("-1", True), ("20", True)])
def test_a_nice_value_out_of_its_range_stops_the_process_at_start(value: str, refused: bool):
    done = settings_run(
        "from django.conf import settings; print(settings.SCRAPEJOBS_WORKER_NICE)",
        SCRAPEJOBS_WORKER_NICE=value,
    )
    if refused:
        assert done.returncode != 0 and f"SCRAPEJOBS_WORKER_NICE={value} is outside 0..19" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert int(done.stdout) == int(value)


def test_make_run_lowers_its_worker_unless_told_otherwise(monkeypatch, tmp_path):
    from scrapejobs.supervise import _dev_env  # noqa: PLC0415

    monkeypatch.setenv("SCRAPEJOBS_RUN_DIR", str(tmp_path))
    monkeypatch.delenv("SCRAPEJOBS_WORKER_NICE", raising=False)
    assert _dev_env()[0]["SCRAPEJOBS_WORKER_NICE"] == "10"
    monkeypatch.setenv("SCRAPEJOBS_WORKER_NICE", "0")
    assert _dev_env()[0]["SCRAPEJOBS_WORKER_NICE"] == "0"
