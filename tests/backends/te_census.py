"""Prepare model=jit under backend=te on the CPU with NNC's IR interpreter standing in for
LLVM/CUDA codegen, and print what the plan shows and which kernels ran, as one JSON line.

Run in a fresh interpreter (tests/backends/test_te_small_shapes.py): TorchScript keeps an
optimised plan per scripted type for the life of the process, so a fused plan made here
would leak into later tests of unfused backends.

    python -m tests.backends.te_census [override ...] [--states-require-grad]
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import torch

from rnnexp.backends.torchscript import TensorExpr
from rnnexp.errors import UnsupportedError
from tests.backends.test_backends import CUDA_GPU
from tests.backends.test_gpu_paths import cpu_workload


class InterpretedTensorExpr(TensorExpr):
    """te with NNC fusing on the CPU as it does on a GPU."""

    def flags(self):
        return replace(super().flags(), fuse_on_cpu=True)


def census(overrides: list[str], states_require_grad: bool) -> dict:
    _, workload = cpu_workload(["model=jit", "backend=jit", *overrides])
    if states_require_grad:
        for state in workload.inputs[1]:
            state.requires_grad_()
    torch._C._jit_set_te_must_use_llvm_cpu(False)  # the IR interpreter instead of LLVM
    te = InterpretedTensorExpr(CUDA_GPU, torch.device("cpu"))
    with te.context():
        try:
            te.prepare(workload)
        except UnsupportedError as err:
            return {"refused": str(err)}
    return {"groups": te.scripted.graph["tensorexpr_groups"],
            "kernels": te.info()["tensorexpr_kernels"]}


if __name__ == "__main__":
    args = sys.argv[1:]
    flag = "--states-require-grad"
    print(json.dumps(census([a for a in args if a != flag], flag in args)))
