"""Does the TensorExpr (NNC) fuser fuse on the CPU here? Run as a fresh interpreter
(`python -m rnnexp.backends.te_probe`) so its flags and kernels never touch the caller.

It scripts a pointwise function under te settings and runs it until the profiling executor
has fused it; a CPU wheel without LLVM raises "LLVM Backend not found" at that point.
Prints one JSON object: fuses, fusion_groups, error.
"""

import json
import warnings

import torch


def f(x, y):
    return torch.sigmoid(x) * torch.tanh(y) + x


def probe() -> dict:
    C = torch._C
    C._jit_set_profiling_executor(True)
    C._set_graph_executor_optimize(True)
    C._jit_set_texpr_fuser_enabled(True)
    C._jit_override_can_fuse_on_cpu(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = torch.jit.script(f)
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    out = {"fuses": False, "fusion_groups": 0, "error": ""}
    try:
        for _ in range(4):  # profiled runs, then the optimised (fused) plan
            g(x, y)
        graph = torch.jit.last_executed_optimized_graph()
        out["fusion_groups"] = sum(n.kind() == "prim::TensorExprGroup" for n in graph.nodes())
        out["fuses"] = out["fusion_groups"] > 0
        out["error"] = "" if out["fuses"] else "no fusion group formed"
    except RuntimeError as err:
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        out["error"] = next((ln for ln in lines if "LLVM" in ln), lines[-1] if lines else "?")
    return out


if __name__ == "__main__":
    print(json.dumps(probe()))
