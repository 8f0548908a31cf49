# runnerd — the two fresh-machine commands are `make run` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= config/dev.toml

.PHONY: run run-kube test lint typecheck pytest bytecode bench check-unit check-unit-files check-config clean

# The compiled session init (issue 22: no interpreter per session). Without a
# C compiler the daemon runs the Python one (runnerd/local/nsinit.py) instead,
# so a missing compiler is a warning, not a failed install.
CC ?= cc
NSINIT_BIN := runnerd/local/nsinit.bin
NSINIT_SRC := runnerd/local/nsinit.c runnerd/local/nssetup.c
$(NSINIT_BIN): $(NSINIT_SRC) runnerd/local/nssetup.h
	@if command -v $(CC) >/dev/null; then \
		$(CC) -O2 -Wall -Wextra -Werror -o $@ $(NSINIT_SRC); \
	else echo "warning: no C compiler ($(CC)): sessions' init runs in Python" >&2; fi

# The methods of runnerd's dataclasses (and its serving layer's), compiled
# once here rather than at every daemon start (runnerd/daemon/dataclasscache.py;
# issue 22: ~30 ms of a start). Rebuilt when a source changes; stale or
# missing, it costs a start that time, never a behaviour.
DATACLASS_CACHE := runnerd/__pycache__/dataclass-methods.stamp
$(DATACLASS_CACHE): $(shell find runnerd -name '*.py') | $(VENV)/.installed
	$(BIN)/python -m runnerd.daemon.dataclasscache >/dev/null
	touch $@

# The installs go through uv (from PyPI, into the venv) when it is there: the
# same packages from the same index as pip, but downloaded in parallel and
# byte-compiled on both cores (a fresh clone's install: ~40 s instead of
# minutes). pip does it when uv could not be installed, or in a venv made
# before uv was used here.
$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q uv || $(BIN)/pip install -q --upgrade pip

install = if [ -x $(BIN)/uv ]; then \
		UV_NATIVE_TLS=1 UV_COMPILE_BYTECODE=1 $(BIN)/uv pip install -q --python $(BIN)/python $(1); \
	else $(BIN)/pip install -q $(1); fi

# Stamp files make the installs idempotent and re-run when pyproject changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(call install,-e .)
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(call install,-e '.[test]')
	touch $(VENV)/.installed $@

run: $(VENV)/.installed $(NSINIT_BIN) $(DATACLASS_CACHE)
	mkdir -p run
	$(BIN)/runnerd serve --config $(CONFIG)

# The test cluster (tests/kubesim) on a free loopback port, then runnerd on
# config/dev-kube.toml against it (its own socket and port: `make run` can run
# beside it); Ctrl-C stops both and removes the cluster's files. The cluster
# prints its URL once its kubeconfig is written, so runnerd starts only then.
KUBESIM_FILES := run/kubesim.url run/kubesim.kubeconfig
run-kube: $(VENV)/.installed-test $(NSINIT_BIN)
	mkdir -p run
	rm -f $(KUBESIM_FILES)
	# The cluster in its own session: a Ctrl-C reaches runnerd alone, which
	# deletes its pods before the trap stops the cluster.
	setsid $(BIN)/python -m tests.kubesim --listen 127.0.0.1:0 \
		--kubeconfig-out run/kubesim.kubeconfig > run/kubesim.url & sim=$$!; \
	trap 'kill $$sim 2>/dev/null; wait $$sim; rm -f $(KUBESIM_FILES)' EXIT; \
	trap 'exit 130' INT; trap 'exit 143' TERM; \
	for i in $$(seq 100); do [ -s run/kubesim.url ] && break; sleep 0.1; done; \
	[ -s run/kubesim.url ] || { echo "the test cluster did not start" >&2; exit 1; }; \
	echo "test cluster at $$(cat run/kubesim.url)"; \
	$(BIN)/runnerd serve --config config/dev-kube.toml

check-config: $(VENV)/.installed
	$(BIN)/runnerd check-config --config $(CONFIG)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

# Two workers per core (pytest-xdist): most tests wait on a daemon, a timer or
# a socket rather than compute, so one per core left the cores idle a third
# of the time (a fresh clone on 2 cores: 284 s of pytest with 2 workers, 204 s
# with 4, the same 1,906 tests). `make pytest PYTEST_WORKERS=0` runs serially.
# worksteal: each worker starts on one contiguous half of the suite (a module's
# shared daemon and test cluster start once, not on both workers) and takes
# half of the other's queue when its own runs dry (one slow module does not
# finish alone). PYTEST_ARGS picks a subset: `make pytest PYTEST_ARGS=tests/e2e`.
PYTEST_WORKERS ?= $(shell echo $$(( 2 * $$(nproc) )))
PYTEST_FLAGS = -q -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)
pytest: $(VENV)/.installed-test bytecode
	$(BIN)/pytest $(PYTEST_FLAGS)

# The suite starts hundreds of Python processes (daemons, the test cluster, the
# CLI): compiled once here, each reads the bytecode even where the environment
# says PYTHONDONTWRITEBYTECODE (it would compile runnerd again at every daemon
# start: 0.76 -> 0.62 CPU s a start). compileall skips what is up to date.
bytecode: $(VENV)/.installed-test $(NSINIT_BIN) $(DATACLASS_CACHE)
	$(BIN)/python -m compileall -q runnerd tests bench

# mypy runs beside the tests (~8 CPU s on a fresh clone, no cache): most
# tests wait on a daemon, a process or a timer, so a core is free for it.
# pytest's summary stays the last line; a mypy failure still fails the run.
test: lint bytecode
	$(BIN)/mypy & typecheck=$$!; \
	$(BIN)/pytest $(PYTEST_FLAGS); tests=$$?; \
	wait $$typecheck || { echo "mypy failed: its errors are above" >&2; exit 1; }; \
	exit $$tests

bench: $(VENV)/.installed-test bytecode
	$(BIN)/python -m bench

# The units as installed for this checkout: ExecStart= is rewritten to the
# venv's runnerd (verify fails on a command that does not exist). Fails when
# verify reports anything or the sandbox's exposure is above 2.1 (2.0 + 0.1 for
# RestrictNamespaces= allowing net: the namespace that cuts sessions off the
# host's network).
# UNIT_SRC lets a test point it at a broken copy; check-unit-files is the
# same check without installing anything, rendering into UNIT_CHECK against
# RUNNERD_BIN (the tests set both: a temp dir, and the runnerd under test).
UNIT_SRC ?= systemd
UNIT_CHECK ?= $(VENV)/unit-check
RUNNERD_BIN ?= $(abspath $(BIN))/runnerd
check-unit: $(VENV)/.installed check-unit-files

check-unit-files:
	@command -v systemd-analyze >/dev/null || \
		{ echo "check-unit needs systemd-analyze: apt-get install systemd" >&2; exit 2; }
	rm -rf $(UNIT_CHECK) && mkdir -p $(UNIT_CHECK)
	sed 's#^ExecStart=/usr/bin/runnerd #ExecStart=$(RUNNERD_BIN) #' \
		$(UNIT_SRC)/runnerd.service > $(UNIT_CHECK)/runnerd.service
	cp $(UNIT_SRC)/runnerd.socket $(UNIT_CHECK)/
	systemd-analyze verify --man=no $(UNIT_CHECK)/runnerd.service $(UNIT_CHECK)/runnerd.socket \
		2>$(UNIT_CHECK)/verify.log; rc=$$?; cat $(UNIT_CHECK)/verify.log >&2; \
		test $$rc -eq 0 && test ! -s $(UNIT_CHECK)/verify.log
	systemd-analyze security --offline=yes --threshold=21 $(UNIT_CHECK)/runnerd.service

clean:
	rm -rf $(VENV) run .mypy_cache .pytest_cache .ruff_cache $(NSINIT_BIN)
