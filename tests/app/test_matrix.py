"""The support matrix is job.plan's verdict for every model × backend."""

import os
import subprocess
import sys

import pytest

from rnnexp.app import support
from rnnexp.app.config_check import group_options
from tests.backends.test_backends import CUDA_GPU, ROCM_GPU
from tests.backends.test_gpu_paths import AMPERE, CUDNN_BROKEN, VOLTA
from tests.conftest import ROOT


def test_matrix_on_a_simulated_cuda_machine():
    cells = support.support(["lstm", "jit", "py"], ["cudnn", "miopen", "jit", "inductor"],
                           device="cuda", plat=CUDA_GPU)
    assert cells["lstm", "cudnn"] == "" and cells["jit", "jit"] == ""
    assert cells["py", "inductor"] == ""
    assert cells["lstm", "miopen"].endswith("this build is CUDA 12.8 — use backend=cudnn")
    assert "use model=jit" in cells["py", "jit"]


@pytest.mark.slow
def test_matrix_command_lists_every_model_backend_and_reason():
    proc = subprocess.run([sys.executable, "-m", "rnnexp", "matrix"], cwd=ROOT,
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for name in group_options("model") + group_options("backend"):
        assert name in out
    assert "✓" in out
    assert len([ln for ln in out.splitlines() if ln.startswith("✗")]) <= 10  # grouped
    for reason in ("backend=cudnn needs a CUDA build of PyTorch; this build is CPU-only — use "
                   "backend=aten",
                   "backend=miopen needs a ROCm build of PyTorch; this build is CPU-only — use "
                   "backend=aten",
                   "model=py, vl_py is eager Python that is never scripted — e.g. for py: "
                   "use model=jit"):
        assert reason in out


def test_matrix_narrows_and_rejects_unknown_names():
    proc = subprocess.run([sys.executable, "-m", "rnnexp", "matrix", "--models", "jit",
                           "--backends", "aten,nope"], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--backends: no such option nope" in proc.stderr


def test_matrix_shows_the_gpu_refusals_on_simulated_cuda_and_rocm():
    bf16 = ["dtype=bfloat16"]
    cuda = support.support(["lstm", "jit"], ["cudnn", "aten"], "cuda",
                          plat=CUDA_GPU, extra=bf16)  # cuDNN 9.10, capability unknown
    assert cells_ok(cuda, ("jit", "cudnn"), ("lstm", "aten"), ("jit", "aten"))
    assert cuda["lstm", "cudnn"].startswith("backend=cudnn runs bfloat16 RNNs only with cuDNN "
                                            ">= 9.13 on SM >= 8.0")
    assert support.support(["lstm"], ["cudnn"], "cuda", plat=AMPERE, extra=bf16) == {
        ("lstm", "cudnn"): ""}
    volta = support.support(["jit"], ["aten"], "cuda", plat=VOLTA, extra=bf16)
    assert volta["jit", "aten"].startswith("dtype=bfloat16: Tesla V100 (SM 7.0) has no native")
    rocm = support.support(["lstm", "jit"], ["miopen"], "cuda", plat=ROCM_GPU, extra=bf16)
    assert rocm["jit", "miopen"] == ""
    assert rocm["lstm", "miopen"].startswith("backend=miopen runs RNNs in float32 and float16 "
                                             "only")
    broken = support.support(["lstm"], ["cudnn", "auto"], "cuda", plat=CUDNN_BROKEN)
    assert broken["lstm", "cudnn"].startswith("backend=cudnn cannot use cuDNN: cuDNN version "
                                              "91100 is not compatible")
    assert broken["lstm", "auto"] == ""  # auto falls back to aten and records why
    tf32 = support.support(["lstm"], ["auto"], "cuda", plat=ROCM_GPU,
                          extra=["backend.allow_tf32=true"])
    assert tf32["lstm", "auto"].startswith("backend=miopen has no TF32 option")


def cells_ok(cells, *keys):
    return all(cells[k] == "" for k in keys)


def test_refusals_shared_by_several_models_are_one_footnote():
    models = ["lstm", "gru", "py", "vl_py"]
    cells = support.support(models, ["jit", "cudnn"], device="cpu")
    table, notes = support.grid(models, ["jit", "cudnn"], cells, "test")
    assert [c.header for c in table.columns] == ["model", "jit", "cudnn"]
    assert len(table.rows) == len(models)
    # cudnn: one reason for all; jit: nn modules (lstm, gru) and eager Python (py, vl_py).
    assert len(notes) == 3, notes
    assert any("model=lstm, gru is an nn module" in n and "e.g. for lstm:" in n for n in notes)
    assert any("model=py, vl_py is eager Python" in n for n in notes)
    assert sum("needs a CUDA build" in n for n in notes) == 1


@pytest.mark.slow  # a docs check: 4 × 7 real plans, ~13 CPU-s
def test_the_docs_example_is_what_the_command_prints_here():
    """docs/backends.md shows `matrix --models lstm,py,jit,gru` on a CPU-only torch 2.13.0
    build: the page and the command must not drift apart."""
    import re

    import torch

    if torch.__version__ != "2.13.0+cpu":
        pytest.skip(f"the page shows torch 2.13.0+cpu; this is {torch.__version__}")
    page = (ROOT / "docs" / "backends.md").read_text()
    shown = re.search(r"matrix --models lstm,py,jit,gru` prints:\n\n```\n(.*?)\n```", page,
                      re.S).group(1).splitlines()
    proc = subprocess.run([sys.executable, "-m", "rnnexp", "matrix", "--models",
                           "lstm,py,jit,gru"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    printed = [ln.rstrip() for ln in proc.stdout.strip("\n").splitlines()]
    assert [ln.strip() for ln in printed] == [ln.strip() for ln in shown]
