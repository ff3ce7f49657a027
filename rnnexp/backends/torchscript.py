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
from typing import ContextManager

import torch

from rnnexp.backends import jitflags
from rnnexp.backends.base import Backend
from rnnexp.backends.jitflags import JitFlags
from rnnexp.platform import Platform
from rnnexp.schema import Executor, JitFuser, ModelConfig
from rnnexp.workload import Workload


class TorchScriptBackend(Backend):
    isolate = True

    def __init__(self, plat: Platform, device: torch.device, **options):
        super().__init__(plat, device, **options)
        self.graph: dict | None = None
        self.flags_seen: JitFlags | None = None

    def flags(self) -> JitFlags:
        raise NotImplementedError

    def check(self, model_name: str, model: ModelConfig) -> None:
        if model.form == "eager":
            twin = f"model={model.twin} (its scripted twin)" if model.twin else "a jit* model"
            self.refuse(f"scripts cell-loop models; model={model_name} is eager Python that is "
                        f"never scripted — use {twin}")
        if model.form == "module":
            loop = (f"its cell loop model={model.twin}" if model.twin
                    else "a loop model such as model=jit")
            self.refuse(f"scripts cell-loop models; model={model_name} is an nn module that "
                        "TorchScript would not change — use backend=aten (or cudnn/miopen), "
                        f"or {loop}")

    def context(self) -> ContextManager:
        return jitflags.in_force(self.flags())

    def finish(self, workload: Workload) -> None:
        self.flags_seen = jitflags.read()
        module = workload.modules[0] if workload.modules else None
        with torch.enable_grad():
            self.graph = jitflags.graph_summary(module, workload.inputs)

    def info(self) -> dict:
        return {"name": self.name,
                "flags": (self.flags_seen or self.flags()).as_dict(),
                "graph": self.graph,
                # The untimed warm-up runs in which the executor profiled and optimised.
                "optimize_s": self.optimize_s, "warm_runs": self.WARM_RUNS}


class Jit(TorchScriptBackend):
    name = "jit"

    def __init__(self, plat: Platform, device: torch.device, executor=Executor.profiling,
                 fuser=JitFuser.none, **options):
        super().__init__(plat, device, **options)
        self.executor = Executor(getattr(executor, "value", executor))
        self.fuser = JitFuser(getattr(fuser, "value", fuser))

    def check(self, model_name: str, model: ModelConfig) -> None:
        super().check(model_name, model)
        # Schema validation already refuses this; a backend built in code must too.
        if self.fuser == JitFuser.legacy and self.executor != Executor.legacy:
            self.refuse("fuser=legacy fuses only under executor=legacy — set "
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
                            f"(probe: {probe['error']}) — use backend=jit or backend=inductor, "
                            "or device=cuda")

    def flags(self) -> JitFlags:
        on_cpu = self.device.type == "cpu"
        return JitFlags(profiling_executor=True, optimize=True, texpr_fuser=True,
                        fuse_on_cpu=on_cpu, fuse_on_gpu=not on_cpu, fuse_on_cpu_legacy=False)

    def info(self) -> dict:
        info = {**super().info(), "fuser": "te"}
        if self.device.type == "cpu":
            info["llvm_probe"] = llvm_probe()
        return info


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
