"""TorchScript's process-global executor and fuser flags, and what an optimised graph holds.

The flags are read back from torch (not from our config) so results record what was in
force; the graph summary counts the nodes that tell executors and fusers apart.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch

_C = torch._C


@dataclass(frozen=True)
class JitFlags:
    profiling_executor: bool = True
    optimize: bool = True  # False: the simple executor (no autodiff graphs, no fusion)
    texpr_fuser: bool = True  # NNC
    fuse_on_cpu: bool = False  # NNC on the CPU (needs LLVM)
    fuse_on_gpu: bool = True  # NNC or, under the legacy executor, the legacy fuser
    fuse_on_cpu_legacy: bool = False  # the legacy fuser on the CPU

    def as_dict(self) -> dict:
        return asdict(self)


def read() -> JitFlags:
    # _jit_set_profiling_executor has no getter: set and put back, it returns the old value.
    pe = _C._jit_set_profiling_executor(True)
    _C._jit_set_profiling_executor(pe)
    return JitFlags(
        profiling_executor=pe,
        optimize=_C._get_graph_executor_optimize(),
        texpr_fuser=_C._jit_texpr_fuser_enabled(),
        fuse_on_cpu=_C._jit_can_fuse_on_cpu(),
        fuse_on_gpu=_C._jit_can_fuse_on_gpu(),
        fuse_on_cpu_legacy=_C._jit_can_fuse_on_cpu_legacy(),
    )


def apply(flags: JitFlags) -> None:
    _C._jit_set_profiling_executor(flags.profiling_executor)
    _C._set_graph_executor_optimize(flags.optimize)
    _C._jit_set_texpr_fuser_enabled(flags.texpr_fuser)
    _C._jit_override_can_fuse_on_cpu(flags.fuse_on_cpu)
    _C._jit_override_can_fuse_on_gpu(flags.fuse_on_gpu)
    _C._jit_override_can_fuse_on_cpu_legacy(flags.fuse_on_cpu_legacy)


@contextlib.contextmanager
def in_force(flags: JitFlags) -> Iterator[JitFlags]:
    old = read()
    apply(flags)
    try:
        yield flags
    finally:
        apply(old)


# Node kinds that identify what the executor and fuser did to a graph.
_KINDS = {
    "prim::TensorExprGroup": "tensorexpr_groups",  # NNC fusion
    "prim::FusionGroup": "fusion_groups",  # legacy fuser
    "prim::DifferentiableGraph": "differentiable_graphs",  # autodiff (PE and LE, not simple)
    "prim::RequiresGradCheck": "guards",  # profiling executor's specialisation guards
    "prim::TypeCheck": "guards",
    "prim::TensorExprDynamicGuard": "guards",
    "prim::BailOut": "guards",
    "prim::profile": "profile_nodes",  # still profiling
}


def _count(block, counts: Counter) -> None:
    for node in block.nodes():
        counts[node.kind()] += 1
        for sub in node.blocks():
            _count(sub, counts)
        if node.hasAttribute("Subgraph"):
            _count(node.g("Subgraph"), counts)


def graph_summary(module: torch.nn.Module, inputs: tuple) -> dict | None:
    """Counts in the optimised graph a scripted module last ran with these inputs (including
    the forward graphs of its differentiable subgraphs, where fusion groups live)."""
    if not isinstance(module, torch.jit.ScriptModule):
        return None
    counts: Counter = Counter()
    _count(module.graph_for(*inputs), counts)
    summary = {name: 0 for name in _KINDS.values()}
    for kind, name in _KINDS.items():
        summary[name] += counts[kind]
    summary["fused"] = bool(summary["tensorexpr_groups"] or summary["fusion_groups"])
    return summary
