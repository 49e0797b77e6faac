"""Where a benchmark's CPU goes: CPU time per kind of process, read from ``/proc`` (Linux).

``CpuMeter(classify)`` samples ``/proc/<pid>/stat`` of every process a few times a second while it
runs and keeps, per process, the CPU time (user + system) it used since the meter started (a
process that starts meanwhile counts from zero; one that exits keeps what was last seen, so the
meter misses at most one sampling interval of it). ``classify(pid, cmdline, environ)`` names the
kind of a process, or None to leave it out; the totals are per kind, in CPU seconds.

With ``switches_of`` (kinds), the meter also counts how often those processes' threads left the
CPU (``switches``): each thread's voluntary context switches (it blocked: on I/O, a lock, the
interpreter lock) and involuntary ones (the kernel preempted it for another runnable task), from
``/proc/<pid>/task/<tid>/status``. A thread that starts meanwhile counts from zero; one that exits
keeps what was last seen.

This is the "CPU profile" of issue 7 at the coarsest grain: how many milliseconds of CPU a job
costs in the worker, the writer, beat, PostgreSQL (backends of the benchmark's own database) and
the target, on a machine other people may be using at the same time.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
Classify = Callable[[int, str, dict[str, str]], str | None]


def _cpu_seconds(pid: int) -> float | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (comm) may hold spaces: split after its closing parenthesis.
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def _status_numbers(path: str, names: tuple[str, ...]) -> tuple[int, ...] | None:
    """The leading numbers of the fields ``names`` of a ``/proc/…/status`` file, in that order;
    None when the file is gone or lacks one of them."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    values = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in lines) if k in names}
    if len(values) < len(names):
        return None
    return tuple(values[name] for name in names)


def _memory_kib(pid: int) -> tuple[int, int] | None:
    """(resident now, peak resident) of a process, in KiB: VmRSS and VmHWM of /proc/<pid>/status
    (None for a zombie or a kernel thread, which have neither)."""
    values = _status_numbers(f"/proc/{pid}/status", ("VmRSS", "VmHWM"))
    return (values[0], values[1]) if values is not None else None


def _thread_switches(pid: int) -> dict[int, tuple[int, int]]:
    """Per thread of ``pid``: (voluntary, involuntary) context switches so far."""
    out: dict[int, tuple[int, int]] = {}
    try:
        tids = [int(entry.name) for entry in os.scandir(f"/proc/{pid}/task") if entry.name.isdigit()]
    except OSError:
        return out
    for tid in tids:
        counts = _status_numbers(
            f"/proc/{pid}/task/{tid}/status", ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
        )
        if counts is not None:  # None: it ended between the listing and the read
            out[tid] = (counts[0], counts[1])
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


class CpuMeter:
    def __init__(
        self, classify: Classify, interval_s: float = 0.2, switches_of: frozenset[str] = frozenset()
    ):
        self.classify = classify
        self.interval_s = interval_s
        self.switches_of = switches_of
        # Per (pid, tid): the (voluntary, involuntary) switches when first seen and when last seen.
        self._switches_first: dict[tuple[int, int], tuple[int, int]] = {}
        self._switches_last: dict[tuple[int, int], tuple[int, int]] = {}
        self._kinds: dict[int, str | None] = {}
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._started: set[int] = set()  # processes already running when the meter started
        self._rss_first: dict[int, int] = {}  # KiB resident when first sampled
        self._rss_peak: dict[int, int] = {}  # KiB, the kernel's high-water mark
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)

    def _sample(self, *, initial: bool = False) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if pid not in self._kinds:
                self._kinds[pid] = self.classify(pid, _cmdline(pid), _environ(pid))
                if initial:
                    self._started.add(pid)
            if self._kinds[pid] is None:
                continue
            used = _cpu_seconds(pid)
            if used is None:
                continue
            # A process first seen after the start counts all its CPU: it started during the run.
            self._first.setdefault(pid, used if pid in self._started else 0.0)
            self._last[pid] = used
            memory = _memory_kib(pid)
            if memory is not None:
                self._rss_first.setdefault(pid, memory[0])
                self._rss_peak[pid] = memory[1]
            if self._kinds[pid] in self.switches_of:
                for tid, counts in _thread_switches(pid).items():
                    # A thread of a process that was running at the start, seen at the start: from
                    # its counts then; any other thread started during the run: from zero.
                    self._switches_first.setdefault((pid, tid), counts if initial else (0, 0))
                    self._switches_last[(pid, tid)] = counts

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> CpuMeter:
        self._sample(initial=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def memory_mib(self) -> dict[str, tuple[float, float]]:
        """Per kind, the largest process's (resident when the meter started, peak resident), MiB:
        the difference is what the run's load added (bench/scaling.py: memory per worker thread)."""
        out: dict[str, tuple[float, float]] = {}
        for pid, peak in self._rss_peak.items():
            kind = self._kinds.get(pid)
            if kind is None:
                continue
            first, top = out.get(kind, (0.0, 0.0))
            out[kind] = (max(first, self._rss_first[pid] / 1024), max(top, peak / 1024))
        return out

    def by_pid(self, kind: str) -> dict[int, float]:
        """CPU seconds per process of ``kind`` used while the meter ran."""
        return {
            pid: max(0.0, last - self._first.get(pid, 0.0))
            for pid, last in self._last.items()
            if self._kinds.get(pid) == kind
        }

    def switches(self) -> dict[str, tuple[int, int]]:
        """Per kind of ``switches_of``: (voluntary, involuntary) context switches of its processes'
        threads while the meter ran."""
        out: dict[str, tuple[int, int]] = {kind: (0, 0) for kind in self.switches_of}
        for key, (voluntary, involuntary) in self._switches_last.items():
            kind = self._kinds.get(key[0])
            if kind not in out:
                continue
            was_voluntary, was_involuntary = self._switches_first[key]
            total = out[kind]
            out[kind] = (
                total[0] + max(0, voluntary - was_voluntary),
                total[1] + max(0, involuntary - was_involuntary),
            )
        return out

    def totals(self) -> dict[str, float]:
        """CPU seconds per kind used while the meter ran."""
        out: dict[str, float] = defaultdict(float)
        for pid, last in self._last.items():
            kind = self._kinds.get(pid)
            if kind is not None:
                out[kind] += max(0.0, last - self._first.get(pid, 0.0))
        return dict(out)


def service_classifier(database: str, *, submit: str, target: str = "bench.slow_target") -> Classify:
    """``classify`` for a benchmark running the service's processes on ``database``: PostgreSQL
    backends of that database, Redis, the target (its command line holds ``target``), and by their
    command lines the processes whose environment points at that database: the submitter (holds
    ``submit``), web, beat, worker and writer."""

    def classify(pid: int, cmdline: str, environ: dict[str, str]) -> str | None:
        if cmdline.startswith("postgres: "):
            return "postgres" if f" {database} " in cmdline else None
        if "redis-server" in cmdline:
            return "redis"  # shared with anything else using that server
        if target in cmdline:
            return "target"
        if not environ.get("DATABASE_URL", "").endswith(f"/{database}"):
            return None
        for marker, kind in (
            (submit, "submit"),
            ("gunicorn", "web"),
            (" beat ", "beat"),
            ("--queues jobs.", "worker"),
            ("--queues control", "writer"),
        ):
            if marker in cmdline:
                return kind
        return None

    return classify
