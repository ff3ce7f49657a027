"""The forward/backward timer.

Each iteration times the forward and the backward separately. Garbage collection, gradient
zeroing, the backward set-up and the creation of CUDA events happen between the timed regions,
and a forward-only run (no backward, or a forward-only model) is timed under `no_grad`, so
autograd's graph recording is not part of its time. Automatic GC is switched off
for the whole loop so it can never fire inside a timed region; a cheap young-generation
collection runs between iterations instead of fastrnns' full `gc.collect()` (which dominated
its wall time).

The timer knows only the `Steps` protocol below, nothing of models.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

import torch


class Steps(Protocol):
    has_backward: bool

    def run_forward(self) -> Any: ...

    def zero_grad(self) -> None: ...

    backward_setup: Optional[Callable[[Any], tuple]]
    backward: Optional[Callable[..., None]]


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

    `arm(n)` creates the next n events before a timed region, so `mark()` only records one:
    creating an event inside the region would put host work between the recorded events."""

    name = "cuda_event"

    def __init__(self, device: torch.device):
        self._device = device
        self._ready: list[torch.cuda.Event] = []

    def arm(self, n: int) -> None:
        self._ready = [torch.cuda.Event(enable_timing=True) for _ in range(n)]

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


@dataclass
class Samples:
    forward_ms: list[float] = field(default_factory=list)
    backward_ms: list[float] = field(default_factory=list)

    @property
    def total_ms(self) -> list[float]:
        if not self.backward_ms:
            return list(self.forward_ms)
        return [f + b for f, b in zip(self.forward_ms, self.backward_ms, strict=True)]


def measure(
    steps: Steps,
    *,
    warmup: int,
    iters: int,
    clock: Clock,
    backward: bool = True,
    progress: Optional[Progress] = None,
    done: Optional[Callable[[Samples], bool]] = None,
    on_timed_start: Optional[Callable[[], None]] = None,
) -> Samples:
    """Run `warmup` untimed then up to `iters` timed iterations; return per-iteration samples.

    `done`, asked between timed iterations (untimed), may end the loop early (a precision
    target). `on_timed_start` is called once after warm-up, before the first timed iteration
    (untimed): a backend snapshots its compile state there to tell, after timing, whether
    anything was compiled inside the timed iterations."""
    progress = progress or _Silent()
    do_backward = backward and steps.has_backward
    arm = getattr(clock, "arm", lambda n: None)  # clocks without events need no arming
    samples = Samples()
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for i in range(warmup + iters):
            timed = i >= warmup
            if i == 0:
                progress.phase("warmup", warmup)
            if i == warmup:
                progress.phase("timed", iters)
                if on_timed_start is not None:
                    on_timed_start()
            steps.zero_grad()
            gc.collect(0)
            arm(4 if do_backward else 2)

            start = clock.mark()
            with torch.set_grad_enabled(do_backward):
                outputs = steps.run_forward()
            end = clock.mark()
            if do_backward:
                args = steps.backward_setup(outputs)  # type: ignore[misc]
                b_start = clock.mark()
                steps.backward(*args)  # type: ignore[misc]
                b_end = clock.mark()
                del args
            del outputs
            clock.sync()
            if timed:
                samples.forward_ms.append(clock.elapsed_ms(start, end))
                if do_backward:
                    samples.backward_ms.append(clock.elapsed_ms(b_start, b_end))
            progress.advance()
            if timed and done is not None and done(samples):
                break
    finally:
        steps.zero_grad()
        if gc_was_enabled:
            gc.enable()
    return samples
