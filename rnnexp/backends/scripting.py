"""What a backend does with a TorchScripted loop model: pin the jit flags, let the executor
profile and optimise before verification and timing, and record the flags and the graph.

Used by `jit`/`te` and by the vendor backends (`aten`/`cudnn`/`miopen`/`auto` also script
`form: loop` models, as fastrnns does). Under the vendor backends the flags are pinned to the
profiling executor with fusion off: TorchScript's defaults fuse with NNC on a GPU but not on
the CPU, so `jit_premul` under `cudnn` would otherwise be a fused graph on CUDA and an unfused
one on the CPU, with nothing saying so. Fusion is what `backend=te` is for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ContextManager

import torch

from rnnexp.backends import jitflags
from rnnexp.backends.base import untimed_runs
from rnnexp.backends.jitflags import JitFlags
from rnnexp.models.workload import Workload

# Unfused profiling executor: what a scripted loop runs under a vendor backend, any device.
UNFUSED = JitFlags(profiling_executor=True, optimize=True, texpr_fuser=False, fuse_on_cpu=False,
                   fuse_on_gpu=False, fuse_on_cpu_legacy=False)


def scripted_module(workload: Workload) -> torch.jit.ScriptModule | None:
    return next((m for m in workload.modules if isinstance(m, torch.jit.ScriptModule)), None)


class ScriptedRun:
    """The TorchScript part of a job: flags in force, untimed optimisation runs, record."""

    # The profiling executor profiles a run and then optimises, and it nests: the forward's
    # differentiable subgraphs get executors of their own, whose backward graphs get theirs.
    # With torch's one profiled run the last of them optimises on the 4th fwd+bwd call
    # (~0.2 s for a fastrnns-shaped loop on one core); left to warm-up, that compilation runs
    # where workers take turns, one at a time, and with bench.warmup=0 it would be timed.
    RUNS = 4

    def __init__(self, flags: JitFlags):
        self.flags = flags
        self.optimize_s: float | None = None
        self.graph: dict | None = None
        self.flags_seen: JitFlags | None = None

    def context(self) -> ContextManager:
        return jitflags.in_force(self.flags)

    def process_state(self) -> tuple:
        """TorchScript's flags stay with the process once a graph ran under them."""
        return ("torchscript", self.flags)

    def optimise(self, workload: Workload, device: torch.device,
                 record: list[float] | None = None) -> bool:
        """Run a scripted model RUNS times off the clock (each call's ms into `record`);
        False if nothing is scripted."""
        if scripted_module(workload) is None:
            return False
        self.optimize_s = untimed_runs(workload, device, self.RUNS, record)
        self.summarise(workload)
        return True

    def summarise(self, workload: Workload) -> dict | None:
        """Flags read back from torch and the optimised graph the module runs."""
        self.flags_seen = jitflags.read()
        module = scripted_module(workload)
        if module is not None:
            with torch.enable_grad():
                self.graph = jitflags.graph_summary(module, workload.inputs)
        return self.graph

    def plan_state(self, workload: Workload) -> PlanState | None:
        """What TorchScript exposes of the plan it runs: the forward's execution plans
        (the legacy executor adds one per new argument signature) and the last optimised
        graph it executed. Fallback paths inside differentiable graphs (the profiling
        executor's bailouts) are not exposed, so they are not seen here."""
        module = scripted_module(workload)
        if module is None:
            return None
        try:
            plans = tuple(p.graph for p in module.get_debug_state().execution_plans.values())
        except RuntimeError:  # the profiling executor asserts until it has optimised
            plans = ()
        return PlanState(plans, torch.jit.last_executed_optimized_graph())

    def timed_start(self, workload: Workload) -> None:
        self._plan_before = self.plan_state(workload)

    def timed_changes(self, workload: Workload) -> str:
        before, after = getattr(self, "_plan_before", None), self.plan_state(workload)
        if before is None or after is None or before.same_as(after):
            return ""
        if len(before.plans) != len(after.plans):
            return (f"TorchScript made new execution plans while timed ({len(before.plans)} "
                    f"after warm-up, {len(after.plans)} after timing)")
        return "TorchScript's optimised graph changed between warm-up and the end of timing"

    def info(self) -> dict:
        return {"flags": (self.flags_seen or self.flags).as_dict(), "graph": self.graph,
                # The untimed runs in which the executor profiled and optimised.
                "optimize_s": self.optimize_s, "warm_runs": self.RUNS}


@dataclass(frozen=True)
class PlanState:
    """Graphs TorchScript ran, as torch's own objects. Read after every visit's samples:
    torch hands back the same object for a graph that is still held, so an unchanged plan is
    told by identity, and only new objects are printed and compared (printing the optimised
    graph of a fastrnns-shaped loop takes ~2 ms; it was ~0.7 s of the fastrnns set's sweep)."""

    plans: tuple
    last: object  # torch._C.Graph, or None before anything optimised ran

    def same_as(self, other: PlanState) -> bool:
        if len(self.plans) != len(other.plans):
            return False
        same = zip(self.plans, other.plans, strict=True)
        if self.last is other.last and all(a is b for a, b in same):
            return True
        return self.printed() == other.printed()

    def printed(self) -> tuple:
        """The plans' graphs and the last one as text: equal for the same plan."""
        return (tuple(sorted(str(g) for g in self.plans)),
                str(self.last) if self.last is not None else "")
