"""backend=te at shape=small: NNC fuses every step, though the optimised plan shows no
fusion group (refused on an H100 before: "formed no TensorExpr fusion group").

TorchScript unrolls the time loop 8 steps a pass and, with backward, guards the unrolled
body on which of its inputs require grad. The first pass starts from the initial states,
which do not, so it takes the guard's fallback graph — which TorchScript then profiles,
optimises and fuses on its own, out of the plan's sight. At seq_len=8 that pass is the whole
sequence. Reproduced on the CPU with NNC's IR interpreter standing in for LLVM/CUDA codegen,
each case in a fresh interpreter (tests/backends/te_census.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def census(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "tests.backends.te_census", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_te_at_the_small_shape_runs_fused_kernels_and_is_not_refused():
    found = census("shape=small")  # seq_len 8: one unrolled pass, the fallback's
    assert "refused" not in found, found
    # A forward kernel for every step (the first step's differs: h0 needs no grad).
    assert sum(n for name, n in found["kernels"].items()
               if name.startswith("fused_add")) >= 8, found
    assert found["groups"] == 0  # all the old check read from the plan


@pytest.mark.slow
def test_initial_states_that_require_grad_pass_the_guard_and_the_plan_shows_the_groups():
    found = census("shape=small", "--states-require-grad")
    assert found["groups"] > 0 and found["kernels"], found
