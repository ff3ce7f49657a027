"""The support matrix is job.plan's verdict for every model × backend."""

import os
import subprocess
import sys

from rnnexp import matrix
from rnnexp.config_check import group_options
from tests.conftest import ROOT
from tests.test_backends import CUDA_GPU


def test_matrix_on_a_simulated_cuda_machine():
    cells = matrix.support(["lstm", "jit", "py"], ["cudnn", "miopen", "jit", "inductor"],
                           device="cuda", plat=CUDA_GPU)
    assert cells["lstm", "cudnn"] == "" and cells["jit", "jit"] == ""
    assert cells["py", "inductor"] == ""
    assert cells["lstm", "miopen"].endswith("this build is CUDA 12.8 — use backend=cudnn")
    assert "use model=jit" in cells["py", "jit"]


def test_matrix_command_lists_every_model_backend_and_reason():
    proc = subprocess.run([sys.executable, "-m", "rnnexp.matrix"], cwd=ROOT,
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for name in group_options("model") + group_options("backend"):
        assert name in out
    assert "✓" in out
    for reason in ("backend=cudnn needs a CUDA build of PyTorch; this build is CPU-only — use "
                   "backend=aten",
                   "backend=miopen needs a ROCm build of PyTorch; this build is CPU-only — use "
                   "backend=aten",
                   "model=py is eager Python that is never scripted — use model=jit"):
        assert reason in out


def test_matrix_narrows_and_rejects_unknown_names():
    proc = subprocess.run([sys.executable, "-m", "rnnexp.matrix", "--models", "jit",
                           "--backends", "aten,nope"], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "--backends: no such option nope" in proc.stderr
