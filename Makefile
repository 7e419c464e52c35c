# Everything a newcomer or CI needs; every target creates .venv first when it is missing.
#   make demo    install, then run the main job (`compaction demo`) on the default SQLite store
#   make test    install, then run the whole test suite
#   make lint    ruff + mypy (strict)
#   make bench   the benchmarks, one Markdown table (BENCH="load surface" picks some)

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install demo test lint bench clean

# (Re)install when the venv is new or pyproject.toml changed since the last install.
$(INSTALLED): pyproject.toml scripts/bootstrap.sh
	PYTHON=$(PYTHON) scripts/bootstrap.sh $(VENV)
	@touch $(INSTALLED)

install: $(INSTALLED)

demo: $(INSTALLED)
	$(BIN)/compaction demo

test: $(INSTALLED)
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: $(INSTALLED)
	$(BIN)/ruff check compaction projections recovery tests benchmarks
	$(BIN)/mypy

bench: $(INSTALLED)
	$(BIN)/python -m benchmarks.run $(BENCH)

clean:
	rm -rf $(VENV) .compaction .mypy_cache .ruff_cache .hypothesis build *.egg-info
