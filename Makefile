# The two commands: `make run` and `make test`. Both work on a fresh machine with only Python 3.11:
# without DATABASE_URL / REDIS_URL they start embedded PostgreSQL and Redis themselves.
SHELL := /bin/bash
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH ?=
# `make bench BENCH=peak MULTIPLE=10`: the peak's ladder up to ten times the seed's peak
# (BENCH_PEAK_MULTIPLE; bench/peak.py, docs/benchmarks.md). Unset: the benchmark's default, 1.
MULTIPLE ?=
PYTEST_ARGS ?=
# Python keeps its bytecode caches (__pycache__, ignored by git) even where the environment says not
# to write them (PYTHONDONTWRITEBYTECODE, set on these machines): without them every process
# compiled the project's modules again as it started, and pytest rewrote every test module's
# asserts again in each of its processes: collecting make test-fast's tests 7.3 CPU-s against
# 3.1, a worker's start 0.86 against 0.77 (docs/development.md).
export PYTHONDONTWRITEBYTECODE :=

.PHONY: run test test-fast lint bench figures install clean schema lock browser

$(STAMP): requirements.txt requirements-dev.txt
	@$(PY) -c "import sys; assert sys.version_info[:2] == (3, 11), sys.version" || { echo "need Python 3.11 (make PY=/path/to/python3.11)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -U pip
	$(BIN)/pip install -q --disable-pip-version-check --require-hashes -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

# Web on 127.0.0.1:$${PORT:-8000}, worker, beat, control and Flower; Ctrl-C stops them all.
run: $(STAMP)
	$(BIN)/python -m scrapejobs.embedded exec --dir .run/dev -- $(BIN)/python -m scrapejobs.supervise

# The whole suite, in two phases against one pair of embedded servers: every test not marked
# `serial` in TEST_PROCS parallel processes (pytest-xdist; each its own test database, Redis
# databases and results directory, see settings/test.py; the tests that start processes mostly
# wait on them), then the `serial` ones (time itself is their subject) in SERIAL_PROCS processes:
# each of them keeps a core's worth of the machine (they wait, at 25-35 % of it), where the whole
# parallel phase would starve them; the heaviest (the budget runs, the 500 waiters) share one
# process (xdist group "heavy-serial"), beside only the light ones.
# TEST_PROCS 4 on 2 cores: with 3 the machine idled while all three waited on their processes
# (a clean-clone run here: parallel phase 1,067 s with 3, 982 s with 4, its CPU then busy
# throughout but for the tail). Exit status 5 is pytest's "no test selected" (a PYTEST_ARGS path
# with none of one phase's).
TEST_PROCS ?= 4
SERIAL_PROCS ?= 2
test: $(STAMP) browser
	$(BIN)/python -m scrapejobs.embedded exec --dir .run/test -- bash -c '\
	  $(BIN)/python -m pytest -n $(TEST_PROCS) --dist loadgroup -m "not serial" $(PYTEST_ARGS); a=$$?; p=$$SECONDS; \
	  $(BIN)/python -m pytest -n $(SERIAL_PROCS) --dist loadgroup -m serial $(PYTEST_ARGS); b=$$?; \
	  echo "make test: parallel phase exit $$a in $${p}s, serial phase exit $$b in $$((SECONDS - p))s, $${SECONDS}s in all"; \
	  [ $$a -eq 0 -o $$a -eq 5 ] && [ $$b -eq 0 -o $$b -eq 5 ] && [ $$a -ne 5 -o $$b -ne 5 ]'

# The fast loop while editing: every test that starts no service process (no web, worker, beat or
# control component, no browser): `-m "not e2e"`, in TEST_FAST_PROCS parallel processes
# (pytest-xdist; each its own test database, Redis databases and results directory, see
# settings/test.py), handed out a test at a time, longest first (`--dist loadgroup`, as make test;
# xdist's default sends each process a block of consecutive tests, and the longest all went to one).
# `make test` is the whole suite.
TEST_FAST_PROCS ?= 6
test-fast: $(STAMP)
	$(BIN)/python -m scrapejobs.embedded exec --dir .run/test -- $(BIN)/python -m pytest -m "not e2e" -q -n $(TEST_FAST_PROCS) --dist loadgroup $(PYTEST_ARGS)

# The dashboard's browser test (tests/operators/test_dashboard_browser.py) drives Debian's chromium
# through chromedriver. Installed here where missing and possible (root with apt-get); otherwise
# this says why that one test will skip. The test itself never installs anything.
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then \
	  true; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "installing chromium and chromium-driver for the dashboard's browser test"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else \
	  echo "no /usr/bin/chromium and no way to install it here (needs apt-get as root):" \
	       "the dashboard's browser test will skip"; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

bench: $(STAMP)
	$(if $(MULTIPLE),BENCH_PEAK_MULTIPLE=$(MULTIPLE) )$(BIN)/python -m scrapejobs.embedded exec --dir .run/bench -- $(BIN)/python -m bench $(BENCH)

# README.md's and docs/benchmarks.md's figures, rendered from bench/results/*.json (which each
# `make bench` run writes); tests/test_figures.py fails when the documents differ from them.
figures: $(STAMP)
	$(BIN)/python -m bench.figures

# Regenerate the lock files (every transitive dependency, pinned, with hashes) from requirements.in
# and requirements-dev.in after editing them; `make install` then installs exactly those.
lock: $(STAMP)
	$(BIN)/uv pip compile requirements.in --generate-hashes --python-version 3.11 --universal -q --custom-compile-command "make lock" -o requirements.txt
	$(BIN)/uv pip compile requirements.in requirements-dev.in --generate-hashes --python-version 3.11 --universal -q --custom-compile-command "make lock" -o requirements-dev.txt

# Rewrite the committed OpenAPI snapshot (tests/api/openapi.json) after a deliberate API change.
schema: $(STAMP)
	$(BIN)/python -m scrapejobs.embedded exec --dir .run/test -- env DJANGO_SETTINGS_MODULE=settings.test $(BIN)/python manage.py spectacular --format openapi-json --file tests/api/openapi.json

clean:
	rm -rf .run
