# Two commands on a fresh machine with only Python: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-pg lint typecheck unit chaos bench clean sandbox-deps browser

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[http,acp,test,pg]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m halo_actors demo

lint: $(STAMP)
	$(BIN)/ruff check halo_actors tests scripts examples
	$(BIN)/ruff format --check halo_actors tests scripts examples

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

# The browser tests drive Debian's Chromium (never a downloaded one). As root it is
# installed when missing; otherwise those tests skip with one line saying so.
CHROMIUM ?= /usr/bin/chromium
browser:
	@if [ ! -x "$(CHROMIUM)" ] && [ "$$(id -u)" = 0 ]; then \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y chromium || { apt-get update && apt-get install -y chromium; }; \
	fi

unit: $(STAMP) sandbox-deps browser
	$(BIN)/pytest

# The workspace sandbox needs bubblewrap (docs/security.md). Root installs it when missing;
# anyone else gets one line, and the tests needing a sandbox skip saying so.
sandbox-deps:
	@if ! command -v bwrap >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get install -y -q bubblewrap || { apt-get update -q && apt-get install -y -q bubblewrap; }; \
		else \
			echo "bubblewrap (bwrap) is missing and this is not root: the sandbox tests will skip"; \
		fi; \
	fi

test: lint typecheck unit

# Only the PostgreSQL tests (HALO_PG_DSN, default the local server); with no server
# they fail here instead of skipping.
test-pg: $(STAMP) sandbox-deps
	HALO_PG_REQUIRED=1 $(BIN)/pytest -m pg

# The chaos suites at full size; `make test` runs a small seeded slice of each.
chaos: $(STAMP) sandbox-deps
	HALO_CHAOS=full $(BIN)/pytest tests/chaos -rA

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python scripts/bench_log.py

clean:
	rm -rf $(VENV) build *.egg-info
