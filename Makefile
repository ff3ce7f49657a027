# rnnexp — run `make help` for the targets.
PYTHON     ?= python3
VENV       ?= .venv
BIN        := $(VENV)/bin
# torch is installed on its own, first, so nothing else can pull a different build:
# TORCH_SPEC is the requirement, TORCH_INDEX an optional package index for it (the CPU or a
# CUDA/ROCm wheel index). The project's machines carry the 2.13.0 CPU wheel locally.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
PYTEST_ARGS ?=

.PHONY: help install browser valgrind bytecode test test-all test-gpu gpu-check gpu-wheels bench run sweep ui server \
	slurm-up slurm-down lint docs clean clean-outputs

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# editable_mode=compat: the project folder goes on sys.path by a .pth file, so Hydra's plugin
# scan finds rnnexp's launcher in the hydra_plugins namespace (it walks folders, not the
# import hooks of setuptools' default editable mode).
install: $(BIN)/python  ## create .venv and install rnnexp (editable) with test and docs tools
	$(BIN)/python -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev,docs,history]" --config-settings editable_mode=compat

# The report's browser tests and `make bench report` open pages in Debian's Chromium, driven by
# Playwright (a dev dependency) through CHROMIUM; no browser is ever downloaded. Installed with
# apt-get where missing (root); elsewhere those tests skip and say why.
CHROMIUM ?= /usr/bin/chromium

browser:  ## Debian's chromium for the report's browser tests (apt-get as root, where missing)
	@test -x $(CHROMIUM) || { \
	  if [ "$$(id -u)" != 0 ]; then echo "make browser: $(CHROMIUM) missing; as root: apt-get install chromium" >&2; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
	@$(CHROMIUM) --version

# bench.metric=instructions counts under Debian's Valgrind (Callgrind); installed with apt-get
# where missing (root). Without it that metric is refused and its slow test skips.
valgrind:  ## Debian's valgrind for bench.metric=instructions (apt-get as root, where missing)
	@command -v valgrind >/dev/null || { \
	  if [ "$$(id -u)" != 0 ]; then echo "make valgrind: valgrind missing; as root: apt-get install valgrind" >&2; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind >/dev/null; }
	@valgrind --version

# The suite runs in parallel (pytest-xdist, a worker a usable core, at most 4: each worker's
# sweeps start processes of their own); a file's tests stay on one worker, so the real sweep
# or server its module fixtures make is made once.
# The whole suite waits as much as it computes (servers starting, a SLURM cluster, signals,
# time limits): two workers more than the cores keep them busy, and its longest files go
# first (tests/conftest.py: LONGEST_FIRST) — on 2 idle cores 15.1 min with four workers
# (1,436 CPU-s, the cores 79% busy), 15.9-17.5 min with three, 21.6 min with two in xdist's
# own order (the SLURM file last) for a suite that also ran more processes.
XDIST_WORKERS := $(shell n=$$(nproc 2>/dev/null || echo 2); [ "$$n" -gt 4 ] && n=4; echo $$n)
XDIST ?= -n $(XDIST_WORKERS) --dist loadfile
XDIST_ALL ?= -n $(shell echo $$(( $(XDIST_WORKERS) + 2 ))) --dist loadfile --no-loadscope-reorder

# The project's bytecode, compiled where stale before a suite: pip compiles the packages it
# installs but not an editable project, and where PYTHONDONTWRITEBYTECODE is set (this
# project's machines) no interpreter writes it either, so each of the suite's hundreds of
# interpreters would compile rnnexp's sources again (~0.1-0.15 CPU-s each). Reading a cached
# file is unaffected by that variable; a stale one is recompiled in memory, never used.
bytecode:
	@$(BIN)/python -m compileall -q rnnexp hydra_plugins tests >/dev/null

test: bytecode  ## the fast suite, in parallel: all but the tests marked slow (GPU tests skip without one)
	$(BIN)/python -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

test-all: bytecode  ## the whole suite, in parallel: slow sweeps, SLURM, browser pages too (what CI runs)
	$(BIN)/python -m pytest $(XDIST_ALL) $(PYTEST_ARGS)

# The interpreter for the GPU targets: PYTHON when given (a GPU machine without .venv, its
# dependencies from wheels on PYTHONPATH: docs/gpu.md), else .venv's if there is one.
GPU_PY := $(if $(filter command line environment,$(origin PYTHON)),$(PYTHON),$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)))
OUT ?=
GPU_CHECK_ARGS ?=

test-gpu:  ## on a GPU: the GPU-marked tests, one per point of docs/gpu.md
	$(GPU_PY) -m pytest -m gpu -v -rs tests/backends/test_gpu_paths.py tests/backends/test_backends.py $(PYTEST_ARGS)
	$(GPU_PY) -m rnnexp matrix --device cuda

gpu-check:  ## on a GPU: every GPU claim in one report (OUT=folder, GPU_CHECK_ARGS=--upstream .upstream)
	$(GPU_PY) benchmarks/gpu_check.py $(if $(OUT),--out $(OUT)) $(GPU_CHECK_ARGS)

gpu-wheels:  ## .whl/: rnnexp's dependencies as Python 3.12 wheels, for a GPU machine with no package index
	bash benchmarks/gpu_wheels.sh

run:  ## one default measurement
	$(BIN)/python -m rnnexp

bench:  ## speed goals: ratios measured side by side in one run; history and bisection checks
	$(BIN)/python benchmarks/harness.py
	$(BIN)/python benchmarks/history.py
	$(BIN)/python benchmarks/history.py --metric instructions
	$(BIN)/python benchmarks/instructions.py

ui:  ## MLflow UI on 127.0.0.1:5000 over the project's store
	$(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow.db --host 127.0.0.1 --port 5000

# A tracking server for sweeps whose jobs run in other processes or on other machines
# (SLURM): runs and parent runs in SERVER_STORE (SQLite here; PostgreSQL with
# SERVER_STORE=postgresql://user:pass@host/db), artifacts uploaded through the server into
# SERVER_ARTIFACTS. Jobs record to it with sinks.mlflow.uri=http://HOST:PORT.
SERVER_HOST ?= 127.0.0.1
SERVER_PORT ?= 5000
SERVER_STORE ?= sqlite:///$(CURDIR)/mlflow.db
SERVER_ARTIFACTS ?= $(CURDIR)/mlartifacts

# Without MLflow's job runner (seven worker processes for MLflow's own jobs, which rnnexp
# never submits).
server:  ## MLflow tracking server (SERVER_HOST:SERVER_PORT) for sweeps on several machines
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(BIN)/mlflow server --backend-store-uri $(SERVER_STORE) \
		--artifacts-destination $(SERVER_ARTIFACTS) --host $(SERVER_HOST) --port $(SERVER_PORT)

# A SLURM cluster on this machine for trying hydra/launcher=rnnexp_slurm (and what the SLURM
# tests start for themselves): munge, slurmctld and two slurmd nodes on 127.0.0.1, everything
# in SLURM_HOME; Debian's packages are installed with apt-get if missing (needs root). Point
# SLURM's commands and the sweep at it with the `export SLURM_CONF=...` line it prints.
SLURM_HOME ?= /tmp/rnnexp-slurm

slurm-up:  ## start a two-node SLURM cluster on 127.0.0.1 (installs slurm-wlm and munge as root)
	$(BIN)/python -m tests.slurm.cluster up $(SLURM_HOME)

slurm-down:  ## stop the cluster slurm-up started (its jobs are cancelled)
	$(BIN)/python -m tests.slurm.cluster down $(SLURM_HOME)

lint:  ## ruff
	$(BIN)/ruff check rnnexp hydra_plugins tests benchmarks examples

docs:  ## build the documentation site into site/ (MkDocs, strict: warnings fail)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean-outputs:  ## remove Hydra output folders
	rm -rf outputs multirun

clean:  ## remove caches
	find . -name __pycache__ -prune -exec rm -rf {} +
	rm -rf .pytest_cache .ruff_cache *.egg-info site
