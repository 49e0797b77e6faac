"""The documents' figures are generated (docs/benchmarks.md, "How the figures get here"): README.md's
figures table and docs/benchmarks.md's tables are what `make figures` renders from
bench/results/*.json, which `make bench` writes; none is typed in by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import figures
from bench.__main__ import results_write

ROOT = Path(__file__).resolve().parent.parent


def test_the_documents_hold_what_make_figures_renders_from_the_results():
    done = subprocess.run(
        [sys.executable, "-m", "bench.figures", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_figure_is_rendered_from_its_result_file_and_a_missing_one_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("BENCH_E2E_JOBS", "40")
    results_write(
        "read",
        figures={"read_cache_ratio": 4.256, "read_with_cache_requests_per_s": 900.0},
        took_s=3.2,
        load_at_start=(0.5, 0.4, 0.3),
    )
    written = json.loads((tmp_path / "read.json").read_text())
    assert written["figures"]["read_cache_ratio"] == 4.256
    assert written["settings"] == {"BENCH_E2E_JOBS": "40"}  # a smaller run says so
    assert written["machine"]["cores"] >= 1 and written["commit"]
    # The processor's model is named with the machine, its trademarks left out: ratios move with it.
    written["machine"]["cpu_model"] = "Intel(R) Xeon(R) Processor"
    (tmp_path / "read.json").write_text(json.dumps(written))
    results = figures.results_load(tmp_path)
    table = figures.readme_table(results)
    cores = written["machine"]["cores"]
    assert f"Measured on {cores} cores (Intel Xeon) (each run's date and machine" in table
    assert (
        f"{cores} cores (Intel Xeon), {written['machine']['memory_gib']} GiB, load 0.5"
        in figures.all_tables(results)
    )
    assert "| `GET /jobs/{id}`, read cache on / off | 4.26× | ≥ 3× |" in table
    peak = "| the seed's peak (28 jobs/s, 20 s targets) × 1, 2, 5, 10: largest multiple holding, and what"
    assert f"{peak} limited the next | not measured yet |" in table
    assert "BENCH_E2E_JOBS=40" in table
    assert "| `read_with_cache_requests_per_s` | 900 |" in figures.all_tables(results)


def test_check_fails_when_a_document_differs(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text(figures.README.read_text().replace("| figure | now |", "| figure | then |", 1))
    monkeypatch.setattr(figures, "README", readme)
    monkeypatch.setattr(figures, "BENCHMARKS", figures.BENCHMARKS)
    assert figures.main(["--check"]) == 1
    assert readme.read_text() != figures.rendered()[readme]


def test_the_peak_row_shows_the_largest_multiple_holding_and_what_limited_the_next(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(tmp_path))
    limited = {
        "peak_largest_multiple_holding": 2,
        "peak_next_multiple": 5,
        "peak_next_multiple_bottleneck": "CPU (worker)",
        "peak_next_multiple_limited_by": "x5: CPU 0.97 of 2 cores x 230 s busy",
    }
    results_write("peak", figures=limited, took_s=900, load_at_start=(0.1, 0.1, 0.1))
    table = figures.readme_table(figures.results_load(tmp_path))
    assert "| **×2** (×5: CPU (worker)) | ×1 (×10 stretch) | `make bench BENCH=peak` |" in table
    untried = {**limited, "peak_next_multiple": 2, "peak_next_multiple_bottleneck": "not tried"}
    untried["peak_largest_multiple_holding"] = 1
    results_write("peak", figures=untried, took_s=300, load_at_start=(0.1, 0.1, 0.1))
    assert "| **×1** (×2 not run) |" in figures.readme_table(figures.results_load(tmp_path))
    none = {**limited, "peak_largest_multiple_holding": 0, "peak_next_multiple": 1}
    results_write("peak", figures=none, took_s=300, load_at_start=(0.1, 0.1, 0.1))
    assert "| **none** (×1: CPU (worker)) |" in figures.readme_table(figures.results_load(tmp_path))
