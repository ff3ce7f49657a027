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

.PHONY: help install test test-gpu bench run sweep ui server slurm-up slurm-down lint docs clean \
	clean-outputs

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
	$(BIN)/python -m pip install -q -e ".[dev,docs]" --config-settings editable_mode=compat

test:  ## run the test suite (CPU; GPU tests skip without a GPU)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-gpu:  ## on a GPU: the GPU-marked tests, one per point of docs/gpu.md
	$(BIN)/python -m pytest -m gpu -v -rs tests/backends/test_gpu_paths.py tests/backends/test_backends.py $(PYTEST_ARGS)
	$(BIN)/python -m rnnexp matrix --device cuda

run:  ## one default measurement
	$(BIN)/python -m rnnexp

bench:  ## speed goals: ratios measured side by side in one run
	$(BIN)/python benchmarks/harness.py

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

server:  ## MLflow tracking server (SERVER_HOST:SERVER_PORT) for sweeps on several machines
	$(BIN)/mlflow server --backend-store-uri $(SERVER_STORE) \
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
