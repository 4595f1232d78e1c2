VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: install lint typecheck test test-fast bench run clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev]'
	touch $@

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/lint-imports

typecheck: install
	$(VENV)/bin/mypy

test: install lint typecheck
	$(VENV)/bin/pytest -q

test-fast: install
	$(VENV)/bin/pytest -q -m "not slow"

bench: install
	$(PY) bench/gemm_search.py

run: install
	$(VENV)/bin/codevolve run gemm-tiling --proposals 1000 --seed 0 --report report.json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache codevolve.sqlite*
