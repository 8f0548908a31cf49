# runnerd — the two fresh-machine commands are `make run` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= config/dev.toml

.PHONY: run test lint typecheck pytest bench check-unit check-config clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Stamp files make the installs idempotent and re-run when pyproject changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $(VENV)/.installed $@

run: $(VENV)/.installed
	mkdir -p run
	$(BIN)/runnerd serve --config $(CONFIG)

check-config: $(VENV)/.installed
	$(BIN)/runnerd check-config --config $(CONFIG)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

pytest: $(VENV)/.installed-test
	$(BIN)/pytest -q

test: lint typecheck pytest

bench: $(VENV)/.installed-test
	$(BIN)/python -m bench

check-unit:
	systemd-analyze verify --man=no systemd/runnerd.service systemd/runnerd.socket || true
	systemd-analyze security --offline=yes --threshold=20 systemd/runnerd.service

clean:
	rm -rf $(VENV) run .mypy_cache .pytest_cache .ruff_cache
