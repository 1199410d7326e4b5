# Two commands on a fresh machine with only Python: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck unit chaos bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[http,acp,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m halo_actors demo

lint: $(STAMP)
	$(BIN)/ruff check halo_actors tests scripts
	$(BIN)/ruff format --check halo_actors tests scripts

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

test: lint typecheck unit

# The chaos suites at full size; `make test` runs a small seeded slice of each.
chaos: $(STAMP)
	HALO_CHAOS=full $(BIN)/pytest tests/chaos -rA

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python scripts/bench_log.py

clean:
	rm -rf $(VENV) build *.egg-info
