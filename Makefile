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

.PHONY: help install test test-gpu bench run sweep ui lint clean clean-outputs

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python  ## create .venv and install rnnexp (editable) with test tools
	$(BIN)/python -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]"

test:  ## run the test suite (CPU; GPU tests skip without a GPU)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-gpu:  ## on a GPU: the GPU-marked tests, one per point of README "On a GPU"
	$(BIN)/python -m pytest -m gpu -v -rs tests/test_gpu_paths.py tests/test_backends.py $(PYTEST_ARGS)
	$(BIN)/python -m rnnexp.matrix --device cuda

run:  ## one default measurement
	$(BIN)/python -m rnnexp

bench:  ## speed goals: ratios measured side by side in one run
	$(BIN)/python -m rnnexp.bench

ui:  ## MLflow UI on 127.0.0.1:5000 over the project's store
	$(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow.db --host 127.0.0.1 --port 5000

lint:  ## ruff
	$(BIN)/ruff check rnnexp tests

clean-outputs:  ## remove Hydra output folders
	rm -rf outputs multirun

clean:  ## remove caches
	find . -name __pycache__ -prune -exec rm -rf {} +
	rm -rf .pytest_cache .ruff_cache *.egg-info
