# Two commands matter (see README): `make run` runs the main job, `make test` runs the whole suite.
# Both create .venv and install everything they need on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test lint typecheck unit bench venv

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,nvml]'
	touch $@

run: venv
	$(BIN)/kdra simulate --report out/simulate-report.html

lint: venv
	$(BIN)/ruff check src tests benchmarks

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest -n 2

test: lint typecheck unit

bench: venv
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done
