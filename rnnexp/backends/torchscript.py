"""TorchScript backends: `jit` (fusion off, executor selectable, optionally the legacy fuser
where it really fuses) and `te` (the TensorExpr/NNC fuser under the profiling executor).

Only cell-loop models (`form=loop`) are scripted; eager Python and nn modules are refused with
a suggestion. The flags are process-global, so these backends ask for a fresh process per job
(`isolate`), and they record the flags in force and the optimised graph's fusion groups.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import lru_cache
from typing import ContextManager, Hashable

import torch

from rnnexp.backends.base import Backend, loop_twin, scripted_twin, untimed_runs
from rnnexp.backends.jitflags import JitFlags
from rnnexp.backends.scripting import ScriptedRun
from rnnexp.config.schema import Executor, JitFuser, ModelConfig
from rnnexp.machine.platform import Platform
from rnnexp.models.workload import Workload


class TorchScriptBackend(Backend):
    isolate = True

    def __init__(self, plat: Platform, device: torch.device, **options):
        super().__init__(plat, device, **options)
        self.scripted = ScriptedRun(self.flags())

    def flags(self) -> JitFlags:
        raise NotImplementedError

    def check(self, model_name: str, model: ModelConfig) -> None:
        if model.form == "eager":
            self.refuse(f"scripts cell-loop models; model={model_name} is eager Python that is "
                        "never scripted", scripted_twin(model))
        if model.form == "module":
            self.refuse(f"scripts cell-loop models; model={model_name} is an nn module that "
                        "TorchScript would not change", "backend=aten (or cudnn/miopen)",
                        loop_twin(model))

    def flags_context(self) -> list[ContextManager]:
        return [self.scripted.context()]

    def process_state(self) -> Hashable:
        return self.scripted.process_state()

    def prepare(self, workload: Workload) -> Workload:
        self.scripted.optimise(workload, self.device, self.untimed_ms)
        return workload

    def finish(self, workload: Workload) -> None:
        self.scripted.summarise(workload)

    def timed_start(self, workload: Workload) -> None:
        self.scripted.timed_start(workload)

    def timed_changes(self, workload: Workload) -> str:
        return self.scripted.timed_changes(workload)

    def info(self) -> dict:
        return {**super().info(), **self.scripted.info()}


class Jit(TorchScriptBackend):
    name = "jit"

    def __init__(self, plat: Platform, device: torch.device, executor=Executor.profiling,
                 fuser=JitFuser.none, **options):
        self.executor = Executor(getattr(executor, "value", executor))
        self.fuser = JitFuser(getattr(fuser, "value", fuser))
        super().__init__(plat, device, **options)

    def check(self, model_name: str, model: ModelConfig) -> None:
        super().check(model_name, model)
        # Schema validation already refuses this; a backend built in code must too.
        if self.fuser == JitFuser.legacy and self.executor != Executor.legacy:
            self.refuse("fuser=legacy fuses only under executor=legacy",
                        "backend.executor=legacy")

    def flags(self) -> JitFlags:
        legacy_fuser = self.fuser == JitFuser.legacy
        on_cpu = self.device.type == "cpu"
        return JitFlags(
            profiling_executor=self.executor == Executor.profiling,
            optimize=self.executor != Executor.simple,
            texpr_fuser=False,
            fuse_on_cpu=False,
            # The legacy executor hands fusion to the legacy fuser; on the CPU it has its own
            # switch, without which it would silently fuse nothing.
            fuse_on_gpu=legacy_fuser and not on_cpu,
            fuse_on_cpu_legacy=legacy_fuser and on_cpu,
        )

    def info(self) -> dict:
        return {**super().info(), "executor": self.executor.value, "fuser": self.fuser.value}


class TensorExpr(Jit):
    """fastrnns `--fuser te`: profiling executor, NNC on; unlike fastrnns, NNC also fuses on
    the CPU when the build has LLVM (and the job is declined when it has not)."""

    name = "te"

    def __init__(self, plat: Platform, device: torch.device, **options):
        super().__init__(plat, device, executor=Executor.profiling, fuser=JitFuser.none,
                         **options)

    def check(self, model_name: str, model: ModelConfig) -> None:
        super().check(model_name, model)
        if self.device.type == "cpu":
            probe = llvm_probe()
            if not probe["fuses"]:
                self.refuse(f"cannot fuse on the CPU: this PyTorch build has no LLVM "
                            f"(probe: {probe['error']})", "backend=jit", "backend=inductor",
                            "device=cuda")

    def prepare(self, workload: Workload) -> Workload:
        super().prepare(workload)
        # What ran, not only what the plan shows: the optimised graph's fused path sits
        # behind guards, and where they fail the fallback graph TorchScript optimises (and
        # fuses) on its own runs instead, out of the plan's sight. With backward, the time
        # loop unrolled 8 steps a pass, and the initial states not requiring grad, the
        # first pass always takes the fallback; at seq_len=8 it is the only pass, so the
        # plan showed no fusion group at all while every step ran fused.
        self.kernels = fused_kernels_run(workload, self.device)
        if not self.kernels:
            # NNC declines some graphs (e.g. bfloat16, and on ROCm builds it may not fuse at
            # all): an unfused graph timed under the name te would be backend=jit's number.
            dtype = str(self.dtype).removeprefix("torch.")
            self.refuse(f"ran no TensorExpr kernel for this model on {self.device} with "
                        f"dtype={dtype} (NNC declined every fusion group); its graph would "
                        "run unfused", "backend=jit")
        return workload

    def flags(self) -> JitFlags:
        on_cpu = self.device.type == "cpu"
        return JitFlags(profiling_executor=True, optimize=True, texpr_fuser=True,
                        fuse_on_cpu=on_cpu, fuse_on_gpu=not on_cpu, fuse_on_cpu_legacy=False)

    def info(self) -> dict:
        info = {**super().info(), "fuser": "te",
                # Fused kernels one iteration launched, by name (after the untimed runs).
                "tensorexpr_kernels": getattr(self, "kernels", None)}
        if self.device.type == "cpu":
            info["llvm_probe"] = llvm_probe()
        return info


# NNC names its kernels fused_<ops> and records each launch under that name.
KERNEL_PREFIX = "fused_"


def fused_kernels_run(workload: Workload, device: torch.device) -> dict[str, int]:
    """The TensorExpr kernels one more untimed iteration launches, by name, with counts."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        untimed_runs(workload, device, 1)
    counts: dict[str, int] = {}
    for event in prof.events():
        if event.name.startswith(KERNEL_PREFIX):
            counts[event.name] = counts.get(event.name, 0) + 1
    return dict(sorted(counts.items()))


@lru_cache(maxsize=1)
def llvm_probe() -> dict:
    """Whether NNC fuses on the CPU here, decided once per process by trying it in a fresh
    interpreter (so the probe's flags and compiled kernels never touch this process)."""
    proc = subprocess.run([sys.executable, "-m", "rnnexp.backends.te_probe"], check=False,
                          capture_output=True, text=True,
                          timeout=300)
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        result = {"fuses": False, "error": f"probe failed: {tail}", "fusion_groups": 0}
    # What the build says about itself, recorded next to what the probe found.
    result["llvm_enabled"] = bool(getattr(torch._C, "_llvm_enabled", lambda: None)())
    return result
