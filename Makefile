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

# The tests are type-checked too (scripts/ need the bench extra, so not here), the way
# pytest imports them: each directory's modules (and those of tests/ itself) are
# top-level modules, so one mypy run per directory (several have a conftest.py).
# tests/runtime is on the path for the chaos drivers' `runtime_harness`.
TEST_DIRS := $(sort $(patsubst %/,%,$(dir $(wildcard tests/*/*.py))))

typecheck: $(STAMP)
	$(BIN)/mypy
	@status=0; \
	for target in "tests/*.py" $(TEST_DIRS); do \
		echo "mypy $$target"; \
		MYPYPATH=tests:tests/runtime $(BIN)/mypy $$target || status=1; \
	done; \
	exit $$status

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
