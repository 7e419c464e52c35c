# Everything a newcomer or CI needs; every target creates .venv first when it is missing.
#   make demo    install the project alone, then run the main job (`compaction demo`) on the default
#                SQLite store
#   make test    install the rest too (dev tools, the local model), then run the whole test suite
#   make lint    ruff + mypy (strict)
#   make bench   the benchmarks, one Markdown table (BENCH="load surface" picks some)
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

.PHONY: install install-test demo test lint bench clean

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
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check compaction projections recovery tests benchmarks
	$(BIN)/mypy

bench: $(BASE_STAMP)
	$(BIN)/python -m benchmarks.run $(BENCH)

clean:
	rm -rf $(VENV) .compaction .mypy_cache .ruff_cache .hypothesis build *.egg-info
