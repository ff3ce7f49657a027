"""Model factories that fail on purpose, named by tests through RNNEXP_TARGETS=tests.

Each takes any options, so it can stand in for any model's factory (model.build._target_)."""

from __future__ import annotations

import torch

from rnnexp.models import native
from rnnexp.models.workload import Workload, WorkloadSpec


def crashing(spec: WorkloadSpec, **options) -> Workload:
    raise ValueError("planted crash in the model factory")


def wrong(spec: WorkloadSpec, **options) -> Workload:
    """nn.LSTM with one weight off by 0.5 after the seeded init: fails verification."""
    workload = native.lstm(spec)
    with torch.no_grad():
        workload.params[0].view(-1)[0] += 0.5
    return workload


def out_of_memory(spec: WorkloadSpec, **options) -> Workload:
    """Asks the allocator for far more than any machine has (a real allocation failure)."""
    torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB
    raise AssertionError("unreachable: the allocation above cannot succeed")


# Where `stalling` says that it stalls (the phase and its process id), for the test to act.
STALLED_ENV = "RNNEXP_TEST_STALLED"
# The functions that call a workload's forward while it is verified or timed.
PHASE_CALLERS = {"verify": ("verify.py", "verify"), "timing": ("measurer.py", "round")}


def _stall(phase: str) -> None:
    import os
    import time

    with open(os.environ[STALLED_ENV], "a") as f:
        f.write(f"{phase} {os.getpid()}\n")
    while True:
        time.sleep(1)


def _called_from(caller: tuple[str, str]) -> bool:
    import sys

    frame = sys._getframe()
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith(caller[0]) and code.co_name == caller[1]:
            return True
        frame = frame.f_back
    return False


def pausing(spec: WorkloadSpec, **options) -> Workload:
    """nn.LSTM whose first timed call writes `timing <pid>` to the file STALLED_ENV names and
    waits until `<that file>.go` exists (at most 10 minutes), then runs on: a test acts on the
    run while it is being timed, at a moment it knows, and the run finishes."""
    workload = native.lstm(spec)
    forward, paused = workload.forward, []

    def pauses(*args):
        if not paused and _called_from(PHASE_CALLERS["timing"]):
            paused.append(True)
            _pause("timing")
        return forward(*args)

    workload.forward = pauses
    return workload


def _pause(phase: str) -> None:
    import os
    import time
    from pathlib import Path

    said = Path(os.environ[STALLED_ENV])
    with open(said, "a") as f:
        f.write(f"{phase} {os.getpid()}\n")
    go, deadline = said.with_name(said.name + ".go"), time.monotonic() + 600
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def stalling(spec: WorkloadSpec, phase: str = "build", **options) -> Workload:
    """nn.LSTM that stops for good in `phase` — build (in this factory), verify or timing (its
    forward, called from there) — after writing `<phase> <pid>` to the file STALLED_ENV
    names."""
    if phase == "build":
        _stall(phase)
    workload = native.lstm(spec)
    forward = workload.forward

    def stalls(*args):
        if _called_from(PHASE_CALLERS[phase]):
            _stall(phase)
        return forward(*args)

    workload.forward = stalls
    return workload
