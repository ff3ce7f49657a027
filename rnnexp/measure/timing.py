"""The forward/backward timer.

Each iteration times the forward and the backward separately. Garbage collection, gradient
zeroing, the backward set-up and the creation of CUDA events happen between the timed regions,
and a forward-only run (no backward, or a forward-only model) is timed under `no_grad`, so
autograd's graph recording is not part of its time. Automatic GC is switched off
for the whole loop so it can never fire inside a timed region; a cheap young-generation
collection runs between samples instead of fastrnns' full `gc.collect()` (which dominated
its wall time).

A sample is one iteration, or the per-iteration mean of a block of back-to-back iterations
(`block_for`, as torch.utils.benchmark's blocked_autorange): microsecond kernels timed one by
one would mostly measure the timer and the loop. A `Timer` keeps a warm workload between
rounds, so a worker process can time its share of a job in turns (rnnexp.run.schedule).

The timer knows only the `Steps` protocol below, nothing of models.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from typing import Any, Callable, Iterator, Optional, Protocol

import torch

from rnnexp.measure.records import Samples


class Steps(Protocol):
    has_backward: bool

    def run_forward(self) -> Any: ...

    def zero_grad(self) -> None: ...

    backward_setup: Optional[Callable[[Any], tuple]]
    backward: Optional[Callable[..., None]]
    # Called before each iteration's forward where the backend replays CUDA graphs.
    step_begin: Optional[Callable[[], None]]


class Clock(Protocol):
    """Marks points in time; `elapsed_ms` is valid after `sync()`."""

    def mark(self) -> Any: ...

    def sync(self) -> None: ...

    def elapsed_ms(self, start: Any, end: Any) -> float: ...


class PerfCounterClock:
    """Host clock; `synchronize` drains queued device work before each mark (no-op on CPU)."""

    name = "perf_counter"

    def __init__(self, synchronize: Callable[[], None] = lambda: None):
        self._sync = synchronize

    def mark(self) -> float:
        self._sync()
        return time.perf_counter()

    def sync(self) -> None:
        self._sync()

    def elapsed_ms(self, start: float, end: float) -> float:
        return (end - start) * 1e3


class CudaEventClock:
    """Device events: times the GPU work between marks without host round-trips inside.

    `arm(n)` makes the next n events before a timed region, so `mark()` only records one:
    creating an event inside the region would put host work between the recorded events.
    torch.cuda.Event() is lazy (c10's CUDAEvent calls cudaEventCreate at its first record),
    so arming records each event once: constructing it alone would create nothing."""

    name = "cuda_event"

    def __init__(self, device: torch.device):
        self._device = device
        self._ready: list[torch.cuda.Event] = []

    def arm(self, n: int) -> None:
        stream = torch.cuda.current_stream(self._device)
        self._ready = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for event in self._ready:
            event.record(stream)  # creates it now; mark() records it again

    def mark(self) -> torch.cuda.Event:
        event = self._ready.pop(0) if self._ready else torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self._device))
        return event

    def sync(self) -> None:
        torch.cuda.synchronize(self._device)

    def elapsed_ms(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return start.elapsed_time(end)


def clock_for(device: torch.device) -> Clock:
    if device.type == "cuda":
        return CudaEventClock(device)
    return PerfCounterClock()


class Progress(Protocol):
    def phase(self, name: str, total: int) -> None: ...

    def advance(self) -> None: ...


class _Silent:
    def phase(self, name: str, total: int) -> None:
        pass

    def advance(self) -> None:
        pass


def block_for(iteration_ms: float, block_ms: float) -> int:
    """Iterations per sample so that one sample takes at least `block_ms` (as
    torch.utils.benchmark's blocked_autorange sizes its blocks): a microsecond kernel timed
    alone is mostly timer and loop overhead. 1 when `block_ms` is 0 or an iteration is long."""
    if block_ms <= 0 or iteration_ms <= 0:
        return 1
    return max(1, min(10_000, math.ceil(block_ms / iteration_ms)))


_frozen = False  # gc.freeze() done in this process


def freeze_once() -> None:
    """Freeze what is alive now, once per process: what exists at a process's first job or
    measurement (torch, Hydra, MLflow, the project) lives as long as the process, and full
    collections — ~0.1–0.3 s each with all of it loaded — then skip it."""
    global _frozen
    if not _frozen:
        gc.freeze()
        _frozen = True


@contextlib.contextmanager
def gc_paused(full: bool = True) -> Iterator[None]:
    """Automatic GC off (it must never fire inside a timed region), restored afterwards; a
    full collection first, or only the youngest generation's (a full one costs ~0.1 s with
    torch loaded: paid once after warm-up, not before every round of samples)."""
    was_enabled = gc.isenabled()
    if full:
        gc.collect()
        freeze_once()
    else:
        gc.collect(0)
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Timer:
    """Warm-up and timed samples of one workload; a worker process keeps one between rounds."""

    def __init__(self, steps: Steps, clock: Clock, backward: bool = True):
        self.steps = steps
        self.clock = clock
        self.do_backward = backward and steps.has_backward
        self._arm = getattr(clock, "arm", lambda n: None)  # clocks without events need none
        # A new iteration for CUDA graph trees (untimed, before the forward's first mark).
        self._step_begin = getattr(steps, "step_begin", None) or (lambda: None)

    def warmup(self, n: int, progress: Optional[Progress] = None) -> float:
        """`n` untimed iterations; the median wall time of one of them in ms (0 if n is 0),
        from which the block size is chosen."""
        progress = progress or _Silent()
        progress.phase("warmup", n)
        walls = []
        with gc_paused():
            for _ in range(n):
                t0 = time.perf_counter()
                self._iterations(1)
                walls.append((time.perf_counter() - t0) * 1e3)
                progress.advance()
        self.steps.zero_grad()
        gc.collect()  # what warm-up left behind; rounds of samples then collect gen 0 only
        return sorted(walls)[len(walls) // 2] if walls else 0.0

    def run(self, n: int, *, block: int = 1, progress: Optional[Progress] = None,
            samples: Optional[Samples] = None) -> Samples:
        """`n` timed samples appended to `samples` (rnnexp.run.schedule decides, between rounds,
        whether more are needed)."""
        progress = progress or _Silent()
        samples = samples if samples is not None else Samples(block=block)
        samples.block = block
        with gc_paused(full=False):
            try:
                for _ in range(n):
                    gc.collect(0)
                    fwd, bwd = self._iterations(block)
                    samples.forward_ms.append(fwd / block)
                    if self.do_backward:
                        samples.backward_ms.append(bwd / block)
                    progress.advance()
            finally:
                self.steps.zero_grad()
        return samples

    def _iterations(self, count: int) -> tuple[float, float]:
        """`count` iterations back to back; summed forward and backward ms. Gradient zeroing
        and the backward set-up stay between the marks."""
        steps, clock = self.steps, self.clock
        self._arm(count * (4 if self.do_backward else 2))
        marks = []
        for _ in range(count):
            steps.zero_grad()
            self._step_begin()
            start = clock.mark()
            with torch.set_grad_enabled(self.do_backward):
                outputs = steps.run_forward()
            end = clock.mark()
            if self.do_backward:
                args = steps.backward_setup(outputs)  # type: ignore[misc]
                b_start = clock.mark()
                steps.backward(*args)  # type: ignore[misc]
                b_end = clock.mark()
                del args
                marks.append((start, end, b_start, b_end))
            else:
                marks.append((start, end, None, None))
            del outputs
        clock.sync()
        fwd = sum(clock.elapsed_ms(a, b) for a, b, _, _ in marks)
        bwd = sum(clock.elapsed_ms(c, d) for _, _, c, d in marks) if self.do_backward else 0.0
        return fwd, bwd


def measure(
    steps: Steps,
    *,
    warmup: int,
    iters: int,
    clock: Clock,
    backward: bool = True,
    progress: Optional[Progress] = None,
    block_ms: float = 0.0,
) -> Samples:
    """Run `warmup` untimed iterations, then `iters` timed samples; a sample is one
    iteration, or with `block_ms` the mean of a block of iterations lasting ≥ block_ms."""
    progress = progress or _Silent()
    timer = Timer(steps, clock, backward)
    iteration_ms = timer.warmup(warmup, progress)
    block = block_for(iteration_ms, block_ms)
    progress.phase("timed", iters)
    return timer.run(iters, block=block, progress=progress)
