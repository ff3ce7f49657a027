"""What every backend does: say whether it can run a model here, how to build it, and the
process flags it needs while the model is verified and timed."""

from __future__ import annotations

import contextlib
import time
from typing import ContextManager

import torch

from rnnexp.errors import UnsupportedError
from rnnexp.platform import Platform
from rnnexp.schema import ModelConfig
from rnnexp.workload import Workload


class Backend:
    name = "base"
    # Process-global settings that may not switch back inside one process (TorchScript):
    # run each job in a fresh process (rnnexp.isolation).
    isolate = False

    def __init__(self, plat: Platform, device: torch.device, **options):
        self.plat = plat
        self.device = device
        self.options = options

    def check(self, model_name: str, model: ModelConfig) -> None:
        """Raise UnsupportedError with a one-line reason if this model cannot run here."""

    def script(self, model: ModelConfig) -> bool:
        """Whether the model's factory should TorchScript it (fastrnns scripts `jit*` models
        under every backend that is not `inductor`)."""
        return model.form == "loop"

    def context(self) -> ContextManager:
        return contextlib.nullcontext()

    # Untimed fwd+bwd runs of a scripted model before verification and timing: the profiling
    # executor profiles the first run(s) and then optimises; left to the timed loop (or to a
    # one-iteration warmup), that compilation would be timed.
    WARM_RUNS = 3
    optimize_s: float | None = None

    def prepare(self, workload: Workload) -> Workload:
        if any(isinstance(m, torch.jit.ScriptModule) for m in workload.modules):
            t0 = time.perf_counter()
            for _ in range(self.WARM_RUNS):
                outputs = workload.run_forward()
                if workload.has_backward:
                    workload.backward(*workload.backward_setup(outputs))  # type: ignore[misc]
            workload.zero_grad()
            self.optimize_s = time.perf_counter() - t0
        return workload

    def finish(self, workload: Workload) -> None:
        """After timing, still inside `context()`: record what actually ran (for `info`)."""

    def info(self) -> dict:
        """Versions and flags that identify what actually ran."""
        return {"name": self.name}

    def refuse(self, reason: str) -> None:
        raise UnsupportedError(f"backend={self.name} {reason}")
