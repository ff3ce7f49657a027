#!/usr/bin/env bash
# Wheels of what rnnexp needs beyond a GPU machine's own Python 3.12 (torch, numpy, scipy,
# pandas, matplotlib, psutil, rich, nvidia-ml-py), for a machine with no package index.
# Run from the project root (`make gpu-wheels`); writes .whl/ (git-ignored). There:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:$PWD        # the project itself from the copied tree
set -euo pipefail
rm -rf .whl && mkdir .whl
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp)
for p in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  PLAT+=(--platform "${p}_x86_64"); done
# antlr4-python3-runtime 4.9.3 (Hydra's parser) is published as a source archive only.
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
# The sweep launchers and MLflow as pyproject.toml pins them; plotly for the HTML report;
# pytest for the GPU-marked tests (`make gpu-check`'s first step).
python3 -m pip download -q "${PLAT[@]}" --find-links .whl -d .whl \
  "hydra-core==1.3.8" "omegaconf==2.3.1" "hydra-joblib-launcher==1.2.0" \
  "hydra-submitit-launcher==1.2.0" "submitit==1.5.4" "mlflow>=3.13,<3.18" \
  "plotly>=6,<8" "jinja2>=3.1,<4" "filelock>=3.12" "pytest>=8" "pytest-timeout>=2.3"
# The GPU machine's own builds of these stay (an ABI-linked second copy would shadow them).
rm -f .whl/{pyarrow,scipy,numpy,pandas,matplotlib,scikit_learn,pillow,fonttools,kiwisolver,contourpy,narwhals}-*.whl
du -sh .whl
