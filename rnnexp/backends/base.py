"""What every backend does: say whether it can run a model here, how to build it, and the
process flags it needs while the model is verified and timed."""

from __future__ import annotations

import contextlib
import time
from typing import ContextManager, Hashable, Iterator, Optional

import torch

from rnnexp.config.schema import ModelConfig
from rnnexp.errors import UnsupportedError
from rnnexp.machine.device import synchronize, use_device
from rnnexp.machine.platform import Platform
from rnnexp.models.workload import Workload


def suggest(*options: str) -> str:
    """'use A', 'use A or B', 'use A, B or C': the one way refusals name what would work."""
    head, last = options[:-1], options[-1]
    return "use " + (f"{', '.join(head)} or {last}" if head else last)


def loop_twin(model: ModelConfig) -> str:
    """The cell-loop formulation to suggest instead of an nn module."""
    return f"its cell loop model={model.twin}" if model.twin else "a loop model such as model=jit"


def scripted_twin(model: ModelConfig) -> str:
    """The scripted formulation to suggest instead of an eager Python loop."""
    return f"model={model.twin} (its scripted twin)" if model.twin else "a jit* model"


@contextlib.contextmanager
def full_fp32_matmuls() -> Iterator[None]:
    """cuBLAS float32 matmuls in full FP32 while a job runs, whatever the process started
    with: TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (ATen's Context.h starts matmul precision at
    "high") or a user's allow_tf32 / set_float32_matmul_precision make them TF32, unrecorded.
    Set through the API family already in use: torch raises once the legacy getters meet a
    precision set through `fp32_precision`."""
    matmul = torch.backends.cuda.matmul
    try:
        legacy = torch.get_float32_matmul_precision()
    except RuntimeError:  # set through fp32_precision: stay with it
        legacy = None
    if legacy is not None:
        torch.set_float32_matmul_precision("highest")
    else:
        old = matmul.fp32_precision
        matmul.fp32_precision = "ieee"
    try:
        yield
    finally:
        if legacy is not None:
            torch.set_float32_matmul_precision(legacy)
        else:
            matmul.fp32_precision = old


def untimed_runs(workload: Workload, device: torch.device, runs: int,
                 record: list[float] | None = None) -> float:
    """`runs` forward(+backward) calls off the clock; seconds they took, GPU work included
    (synchronised before the clock is read). Gradients are cleared afterwards. `record`
    gets each call's wall time in ms (synchronised after each call: a job's start-up,
    rnnexp.models.compile_cost).

    Grad mode as the timer will have it: a workload built without gradients
    (bench.backward=false) or without a backward is timed under no_grad, and a compiled or
    scripted graph specialises on grad mode, so it must be warmed under the same one.

    Each call starts with no gradients, as a timed iteration does: a backward into the
    previous call's gradients would read them, and under CUDA graphs those are outputs of
    the previous replay, overwritten by now."""
    backward = workload.has_backward and any(p.requires_grad for p in workload.params)
    t0 = time.perf_counter()
    for _ in range(runs):
        call = time.perf_counter()
        workload.zero_grad()
        if workload.step_begin is not None:
            workload.step_begin()
        with torch.set_grad_enabled(backward):
            outputs = workload.run_forward()
        if backward:
            workload.backward(*workload.backward_setup(outputs))  # type: ignore[misc]
        del outputs
        if record is not None:
            synchronize(device)
            record.append((time.perf_counter() - call) * 1e3)
    if record is None:  # else the last call's synchronise did it
        synchronize(device)
    seconds = time.perf_counter() - t0
    workload.zero_grad()
    return seconds


class Backend:
    name = "base"
    # Process-global settings that may not switch back inside one process (TorchScript):
    # run each job in a fresh process (rnnexp.measure.isolation).
    isolate = False
    # Untimed calls every model gets in `prepare`, whatever `bench.warmup` and `bench.verify`
    # say: first-use costs (cuDNN handles and dropout state, MIOpen's kernel compilation,
    # allocator growth) must never land in timed iteration 0.
    FIRST_CALLS = 1
    # What `prepare` builds runs as well whatever the intra-op threads were while it was
    # built: workers may build on one thread side by side (rnnexp.run.blocks).
    builds_on_one_thread = True

    def __init__(self, plat: Platform, device: torch.device,
                 dtype: torch.dtype = torch.float32, **options):
        if options:  # the schema refuses these at composition; a backend built in code too
            raise TypeError(f"backend={self.name} takes no option {', '.join(options)}")
        self.plat = plat
        self.device = device
        self.dtype = dtype
        self.first_call_s: float | None = None
        # Each untimed call made in `prepare`, in ms (rnnexp.models.compile_cost).
        self.untimed_ms: list[float] = []
        self.matmul_fp32_precision: str | None = None  # read inside context()

    def check(self, model_name: str, model: ModelConfig) -> None:
        """Raise UnsupportedError with a one-line reason if this model cannot run here."""

    def script(self, model: ModelConfig) -> bool:
        """Whether the model's factory should TorchScript it (fastrnns scripts `jit*` models
        under every backend that is not `inductor`)."""
        return model.form == "loop"

    def context(self) -> ContextManager:
        """Entered around build, verification and timing: the chosen GPU is the current one
        (so `device.index >= 1` jobs query and run on it), float32 matmuls in full FP32,
        plus the backend's own flags."""
        stack = contextlib.ExitStack()
        stack.enter_context(use_device(self.device))
        stack.enter_context(full_fp32_matmuls())  # no backend offers TF32 matmuls
        for ctx in self.flags_context():
            stack.enter_context(ctx)
        # Read back, for the record: what float32 matmuls ran with ("ieee": full FP32).
        self.matmul_fp32_precision = torch.backends.cuda.matmul.fp32_precision
        return stack

    def flags_context(self) -> list[ContextManager]:
        return []

    def process_state(self) -> Optional[Hashable]:
        """What this backend leaves set for the whole process that may not switch back
        (TorchScript's executor and fuser flags): configurations with equal states can take
        turns in one worker process (rnnexp.run.blocks). None: its set-up resets what other
        configurations of a process rely on, so it needs processes of its own."""
        return ()

    def prepare(self, workload: Workload) -> Workload:
        self.first_call_s = untimed_runs(workload, self.device, self.FIRST_CALLS,
                                         self.untimed_ms)
        return workload

    def compiles(self, workload: Workload) -> bool:
        """Whether this job's model was compiled or scripted (its start-up is a compile)."""
        return workload.script_s is not None

    def compile_seconds(self, workload: Workload) -> float | None:
        """Seconds spent compiling as the compiler reports them (None: nothing compiled):
        torch.jit.script's, timed where the model's factory scripted it."""
        return workload.script_s

    def finish(self, workload: Workload) -> None:
        """After timing, still inside `context()`: record what actually ran (for `info`)."""

    def timed_start(self, workload: Workload) -> None:
        """Called by the timer after warm-up, before the first timed iteration (untimed):
        snapshot whatever compile state `timed_changes` compares against."""

    def timed_changes(self, workload: Workload) -> str:
        """What was compiled (recompiled, re-planned) during the timed iterations, in a few
        words; "" when nothing was. A non-empty answer makes the job's status `recompiled`."""
        return ""

    def info(self) -> dict:
        """Versions and flags that identify what actually ran."""
        return {"name": self.name, "first_call_s": self.first_call_s,
                "matmul_fp32_precision": self.matmul_fp32_precision}

    def refuse(self, reason: str, *use: str) -> None:
        """One line: `backend=NAME <reason> — use <what would work>`."""
        raise UnsupportedError(f"backend={self.name} {reason}" + (f" — {suggest(*use)}"
                                                                   if use else ""))
