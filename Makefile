# Everything installs into .venv on first use; only Python 3.11+ and make are needed.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	&& echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The tests cache compiled modules even where the environment says not to: they start the
# service in hundreds of processes, and each compiled the whole app again (~12% of the time of
# the process-heavy tests). A suite also lists its slowest tests: where a slow machine's run went.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest --durations=15

.PHONY: help install run test test-sqlite test-postgres lint format migrate openapi bench fuzz clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml client/pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.11 or newer is needed"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet -e ./client
	touch $@

install: $(STAMP) ## create .venv with the service and its dev tools

run: $(STAMP) ## run the service on 127.0.0.1:8080, or PORT (SQLite and files in ./contexts)
	$(BIN)/context-service serve $(if $(PORT),--port $(PORT))

# SIDE_BY_SIDE: the tests marked database_agnostic are shared between the two (tests/conftest.py).
test: $(STAMP) ## the whole test suite on SQLite and on PostgreSQL, side by side
	@SIDE_BY_SIDE=1 $(MAKE) --no-print-directory -j2 --output-sync=target test-sqlite test-postgres

test-sqlite: $(STAMP) ## the whole test suite on SQLite
	$(PYTEST)

# scripts/test-postgres installs Debian's PostgreSQL when missing and starts a throwaway server,
# stopped when the suite ends (one already running is used and left running); its failure
# fails the target (never a silent run on SQLite).
test-postgres: $(STAMP) ## the whole test suite on PostgreSQL (a throwaway server on 127.0.0.1)
	scripts/test-postgres run $(PYTEST)

lint: $(STAMP) ## ruff (lint + format check), mypy, alembic check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP) ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

migrate: $(STAMP) ## create or upgrade the database in CONTEXT_DIR
	$(BIN)/context-service migrate

openapi: $(STAMP) ## regenerate openapi.yaml from the app
	$(BIN)/context-service openapi > openapi.yaml

bench: $(STAMP) ## run every benchmark (takes minutes; writes bench/results/ and bench/README.md)
	$(BIN)/python -m bench

# FUZZ_MINUTES bounds the time (conversations not started by then are left out); FUZZ_SEED
# replays a run.
FUZZ_CONVERSATIONS ?= 10000
FUZZ_WORKERS ?= 2
fuzz: $(STAMP) ## play 10,000 random conversations against the real app, invariants after each step
	$(BIN)/python -m tests.fuzz --conversations $(FUZZ_CONVERSATIONS) --workers $(FUZZ_WORKERS) \
		$(if $(FUZZ_MINUTES),--minutes $(FUZZ_MINUTES)) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

clean: ## remove .venv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
