# Two commands: `make run` (the console, embedded defaults) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
PYTEST_ARGS ?=
export PATH := $(BIN):$(PATH)

.PHONY: run test chaos venv install install-test clean-data lint typecheck imports check

$(BIN)/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Vigil needs Python 3.11 or newer"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: requirements.txt sdk/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet -e ./sdk
	touch $@

$(VENV)/.installed-test: requirements.txt requirements-test.txt sdk/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements-test.txt
	$(BIN)/python -m pip install --quiet -e ./sdk
	touch $@

venv: $(BIN)/python
install: $(VENV)/.installed-run
install-test: $(VENV)/.installed-test

run: $(VENV)/.installed-run
	$(BIN)/python manage.py migrate --noinput -v0
	$(BIN)/python manage.py collectstatic --noinput -v0
	$(BIN)/python manage.py bootstrap
	$(BIN)/python -m console.devredis -- $(BIN)/honcho -f Procfile start

test: $(VENV)/.installed-test
	$(BIN)/python -m testsupport.suite $(PYTEST_ARGS)

# Issue 20's chaos suite: its own console, Redis and databases (SQLite and PostgreSQL at
# CHAOS_PG_URL, default postgres://postgres@127.0.0.1:5432/vigil_chaos); ~11 min in full.
# CHAOS_ARGS=--quick runs the CI subset, CHAOS_ARGS="--db sqlite --only worker-kill" one row.
CHAOS_ARGS ?=
chaos: $(VENV)/.installed-test
	$(BIN)/python bench/chaos.py $(CHAOS_ARGS)

clean-data:
	rm -rf var/

# The repo's own checks; `.ci/run` runs `make check` before the tests.
lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy core infra console jobs monitoring notifications testsupport

imports: $(VENV)/.installed-test
	$(BIN)/lint-imports

check: lint typecheck imports
	$(BIN)/python manage.py makemigrations --check --dry-run
