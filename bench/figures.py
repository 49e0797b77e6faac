"""``make figures``: the documents' figures, rendered from what the benchmarks wrote.

Every ``make bench BENCH=<name>`` run writes ``bench/results/<name>.json`` (bench/__main__.py): its
figures, the commit, the machine and the ``BENCH_*`` settings it ran with. This renders, from those
files only:

- README.md's figures table (between ``<!-- figures:readme -->`` and ``<!-- /figures:readme -->``):
  the few figures a newcomer asks about, each a ratio measured side by side where one exists;
- docs/benchmarks.md's tables (between ``<!-- figures:all -->`` and ``<!-- /figures:all -->``):
  every figure of every benchmark's last run, with where and when it was measured.

A figure no result file holds is shown as not measured, never typed in by hand. ``--check`` renders
and compares instead of writing, and exits 1 when a document differs (tests/test_figures.py).

    python -m bench.figures [--check]
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
README = ROOT / "README.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"

Figures = dict[str, Any]


def _num(value: Any, digits: int = 2) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}" if abs(value) < 100 else f"{value:,.0f}"


class Missing(Exception):
    """A figure the result file does not hold."""


def _get(figures: Figures, key: str) -> Any:
    if key not in figures:
        raise Missing(key)
    return figures[key]


@dataclass(frozen=True)
class Row:
    label: str
    bench: str
    render: Callable[[Figures], str]
    aim: str


def _e2e_ratio(latency_ms: int) -> Callable[[Figures], str]:
    def render(f: Figures) -> str:
        tag = f"e2e_{latency_ms}ms"
        tuned = _get(f, f"{tag}_scrapejobs_to_tuned_ratio")
        spread = _get(f, f"{tag}_scrapejobs_to_tuned_ratio_spread")
        naive = _get(f, f"{tag}_scrapejobs_to_naive_ratio")
        return f"**{_num(tuned)}×** (±{_num(spread / 2)}); naive task: {_num(naive)}×"

    return render


def _e2e_littles_law(f: Figures) -> str:
    ours = _get(f, "e2e_500ms_scrapejobs_share_of_littles_law")
    one = _get(f, "e2e_500ms_scrapejobs_one_process_share_of_littles_law")
    processes = _get(f, "e2e_worker_processes")
    tuned = _get(f, "e2e_500ms_tuned_share_of_littles_law")
    idle = _get(f, "e2e_500ms_scrapejobs_idle_slot_share")
    # Thread time outside an attempt (waiting for a message, the gate, the claim, the receipt)
    # while jobs waited to start: bench/e2e.py ``_pool_use``. The pool's threads in the bench's
    # worker processes, and in one (the layout's worth, docs/benchmarks.md).
    return (
        f"{_num(ours)} in {_num(processes)} processes, {_num(one)} in one (tuned task: {_num(tuned)}; "
        f"threads out of an attempt, jobs waiting: {_num(idle * 100, 0)} %)"
    )


def _e2e_cpu(f: Figures) -> str:
    ours = _get(f, "e2e_0ms_scrapejobs_cpu_ms_per_job_service")
    tuned = _get(f, "e2e_0ms_tuned_cpu_ms_per_job_service")
    fast = _num(_get(f, "e2e_0ms_cpu_per_job_to_tuned_ratio"))
    slow = _num(_get(f, "e2e_500ms_cpu_per_job_to_tuned_ratio"))
    return f"**{fast}×** at 1 ms ({_num(ours)} / {_num(tuned)} ms); {slow}× at 500 ms"


def _budget_rows(f: Figures) -> str:
    versions = sum(_get(f, f"budget_rows:jobs_job:{kind}") for kind in ("inserted", "updated"))
    return f"{_num(versions)} / {_num(_get(f, 'budget_index_entries_per_job'))}"


def _peak(f: Figures) -> str:
    """The largest multiple of the seed's peak that held, and what limited the next one (its
    bottleneck, named from measurements by bench/peak.py) or that it was not tried."""
    largest = int(_get(f, "peak_largest_multiple_holding"))
    after = _get(f, "peak_next_multiple")
    kind = _get(f, "peak_next_multiple_bottleneck")
    held = f"**×{largest}**" if largest else "**none**"
    if kind == "not tried":
        return f"{held} (×{_num(after)} not run)"
    return f"{held} (×{_num(after)}: {kind})"


def _capacity(f: Figures) -> str:
    shares = sorted(
        (int(m.group(1)), value)
        for key, value in f.items()
        if (m := re.fullmatch(r"capacity_(\d+)_share_of_littles_law", key))
    )
    if not shares:
        raise Missing("capacity_<threads>_share_of_littles_law")
    return " / ".join(f"{n}: {share:.2f}" for n, share in shares)


def _admin_slowest(f: Figures) -> str:
    pages = {k: v for k, v in f.items() if re.fullmatch(r"admin_.+_ms", k) and not k.endswith("_small_ms")}
    if not pages:
        raise Missing("admin_<page>_ms")
    key = max(pages, key=lambda k: pages[k])
    return f"{_num(pages[key], 0)} ms ({key.removeprefix('admin_').removesuffix('_ms')})"


def _crawl(f: Figures) -> str:
    ratio = _get(f, "crawl_scrapejobs_to_scrapy_pages_per_s")
    ours = _get(f, "crawl_scrapejobs_share_of_littles_law")
    theirs = _get(f, "crawl_scrapy_share_of_littles_law")
    return f"**{_num(ratio)}×** (Little's law: {_num(ours)}; Scrapy {_num(theirs)})"


README_ROWS = (
    Row("end to end, 1 ms target: scrapejobs / tuned bare Celery task", "e2e", _e2e_ratio(0), "≥ 0.8×"),
    Row("end to end, 500 ms target, 100 threads: scrapejobs / tuned task", "e2e", _e2e_ratio(500), "≥ 0.95×"),
    Row("end to end, 500 ms target: share of Little's law", "e2e", _e2e_littles_law, "≥ 0.9"),
    Row("CPU per job, all service processes / the tuned task's", "e2e", _e2e_cpu, "≤ 2.0×"),
    Row("`jobs_job` row versions / index entries per job (held by a test)", "budget", _budget_rows, "–"),
    Row(
        "the seed's peak (28 jobs/s, 20 s targets) × 1, 2, 5, 10: largest multiple holding, "
        "and what limited the next",
        "peak",
        _peak,
        "×1 (×10 stretch)",
    ),
    Row(
        "one worker, 10 s target: share of Little's law by threads",
        "capacity",
        _capacity,
        "≥ 0.9",
    ),
    Row(
        "`GET /jobs/{id}`, read cache on / off",
        "read",
        lambda f: f"{_num(_get(f, 'read_cache_ratio'))}×",
        "≥ 3×",
    ),
    Row("slowest admin page at 1,000,000 jobs", "admin", _admin_slowest, "< 300 ms"),
    Row(
        "crawl, 5,000 pages of a 2 s site, 100 at once: pages/s, scrapejobs / Scrapy",
        "crawl",
        _crawl,
        "≥ 1.0×",
    ),
)


def results_load(where: Path = RESULTS) -> dict[str, dict[str, Any]]:
    """Every benchmark's last written result, by name."""
    if not where.is_dir():
        return {}
    return {p.stem: json.loads(p.read_text()) for p in sorted(where.glob("*.json"))}


def _when(result: dict[str, Any]) -> str:
    machine = result.get("machine", {})
    load = machine.get("load_average_at_start") or ["?"]
    small = " with settings other than the defaults: " + ", ".join(
        f"{k}={v}" for k, v in result["settings"].items()
    )
    return (
        f"{result.get('finished_at', '?')[:10]}, commit {result.get('commit', '?')}, "
        f"{_machine(result)}, load {load[0]} at the start" + (small if result.get("settings") else "")
    )


def readme_table(results: dict[str, dict[str, Any]]) -> str:
    lines = ["| figure | now | aim | command |", "|---|---|---|---|"]
    for row in README_ROWS:
        result = results.get(row.bench)
        try:
            if result is None:
                raise Missing(row.bench)
            now = row.render(result["figures"])
        except Missing:
            now = "not measured yet"
        lines.append(f"| {row.label} | {now} | {row.aim} | `make bench BENCH={row.bench}` |")
    used = sorted({row.bench for row in README_ROWS if row.bench in results})
    if used:
        machines = sorted({_machine(results[name], memory=False) for name in used})
        lines.append("")
        lines.append(
            f"Measured on {' / '.join(machines)} (each run's date and machine: docs/benchmarks.md): "
            + "; ".join(f"`{name}` {_when_short(results[name])}" for name in used)
            + "."
        )
    return "\n".join(lines)


def _machine(result: dict[str, Any], *, memory: bool = True) -> str:
    """Cores, their model and (``memory``) memory: a ratio moves with the processor (the same
    service and baseline gave other CPU ratios on an AMD EPYC and an Intel Xeon of 2 cores each)."""
    machine = result.get("machine", {})
    model = " ".join(str(machine.get("cpu_model", "?")).replace("(R)", "").replace("(TM)", "").split())
    cores = f"{machine.get('cores', '?')} cores ({model.removesuffix(' Processor')})"
    return f"{cores}, {machine.get('memory_gib', '?')} GiB" if memory else cores


def _when_short(result: dict[str, Any]) -> str:
    """The README's note of a run: its commit and the load it started at (and settings not the
    defaults); the rest is docs/benchmarks.md's (``_when``)."""
    load = result.get("machine", {}).get("load_average_at_start") or ["?"]
    settings = ", ".join(f"{k}={v}" for k, v in result.get("settings", {}).items())
    return f"at {result.get('commit', '?')}, load {load[0]}" + (f", {settings}" if settings else "")


def all_tables(results: dict[str, dict[str, Any]]) -> str:
    if not results:
        return "No benchmark has written its results yet: run `make bench`."
    out: list[str] = []
    for name, result in results.items():
        figures = result["figures"]
        out.append(f"### `{name}`")
        out.append("")
        out.append(f"`{result['command']}`: {_when(result)}; it took {result.get('took_s', '?')} s.")
        out.append("")
        out.append(f"<details><summary>its {len(figures)} figures</summary>")
        out.append("")
        out.append("| figure | value |")
        out.append("|---|---|")
        out.extend(f"| `{key}` | {_num(value)} |" for key, value in figures.items())
        out.append("")
        out.append("</details>")
        out.append("")
    return "\n".join(out).rstrip()


def _replace(text: str, marker: str, body: str) -> str:
    start, end = f"<!-- figures:{marker} -->", f"<!-- /figures:{marker} -->"
    if start not in text or end not in text:
        raise SystemExit(f"the markers {start} … {end} are missing")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def rendered(results: dict[str, dict[str, Any]] | None = None) -> dict[Path, str]:
    """The documents as `make figures` writes them."""
    results = results_load() if results is None else results
    return {
        README: _replace(README.read_text(), "readme", readme_table(results)),
        BENCHMARKS: _replace(BENCHMARKS.read_text(), "all", all_tables(results)),
    }


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, text in rendered().items():
        if path.read_text() != text:
            if check:
                stale.append(path.name)
            else:
                path.write_text(text)
                print(f"rendered {path.name}")
    if stale:
        print(f"out of date with bench/results: {', '.join(map(str, stale))}; run `make figures`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
