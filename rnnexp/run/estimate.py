"""How long a run will take here, said before it starts: the work of its iterations (the
model's work count) at the device's measured roofline (rnnexp.run.roofline), stretched by
what the machine's other processes take of its cores now. A compute-bound recurrent layer at
fastrnns' default shape runs close to its GEMM peak, so on an idle machine this is near the
real time there, and a lower bound anywhere (small shapes are bound by per-step overhead
instead). The load is the 1-minute load average, less this process: on a 2-core machine
with a load of 13 the default run took 474 s where the idle figure said 60."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import torch

from rnnexp.machine import device as device_mod
from rnnexp.measure import job
from rnnexp.models import work as work_mod
from rnnexp.models.work import Work
from rnnexp.run import roofline

# Said only when a run takes longer than this: a few-second run needs no warning.
WORTH_SAYING_S = 10.0
# Work counts by model family, from the shape alone (no model is built for the estimate).
FAMILIES = {"lstm": work_mod.lstm_work, "gru": work_mod.gru_work}


@dataclass(frozen=True)
class Estimate:
    seconds: float  # on this machine now: the work at the measured peaks, × `slower`
    iterations: int
    gflop: float  # per iteration, forward (+ backward)
    peak_gflops: float
    slower: float = 1.0  # what the machine's load takes of the cores the run needs (≥ 1)
    others: float = 0.0  # cores' worth of other processes (load average less this one)
    cores: int = 0

    def line(self) -> str:
        work = (f"{self.iterations} iterations of {self.gflop:.3g} GFLOP at this device's "
                f"measured {self.peak_gflops:.3g} GFLOP/s")
        if self.slower > 1.05:
            others = f"{self.others:.1f}" if self.others < 10 else f"{self.others:.0f}"
            why = (f" ({duration(self.seconds / self.slower)}), ×{self.slower:.1f} as other "
                   f"processes keep ~{others} of {self.cores} cores busy")
        else:
            why = "; longer if the machine gets busy"
        return (f"estimate: ~{duration(self.seconds)} here — {work}{why}; shape=small "
                "bench=quick takes seconds")


def duration(seconds: float) -> str:
    """`45 s`, `7 min`, `2.5 h`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def slower_by(load: float, threads: int, cores: int) -> tuple[float, float]:
    """(how many times longer the run takes, other processes' cores): `threads` compute
    threads share `cores` with the other runnable processes — the 1-minute load average
    `load`, less this process's own — once together they want more than the cores."""
    others = max(0.0, load - 1.0)
    return max(1.0, (others + threads) / max(1, cores)), others


def machine_load() -> tuple[float, int]:
    """The 1-minute load average and the cores this process may run on."""
    from rnnexp.machine.environment import usable_cores

    try:
        load = os.getloadavg()[0]
    except OSError:  # not on this platform
        load = 0.0
    return load, usable_cores()


def work_of(p: job.Plan) -> Optional[Work]:
    count = FAMILIES.get(str(p.cfg.model.family))
    if count is None:
        return None
    elem_bytes = torch.empty((), dtype=p.spec.dtype).element_size()
    return count(p.cfg.shape, elem_bytes)


def iterations(p: job.Plan) -> int:
    """Each process's warm-up, and the timed iterations they share."""
    bench = p.cfg.bench
    return bench.warmup * max(1, bench.processes) + bench.iters


def of_plan(p: job.Plan) -> Optional[Estimate]:
    """The estimate, or None where there is no work count or no roofline to place it on."""
    w = work_of(p)
    if w is None or not p.cfg.bench.roofline:
        return None
    threads = p.cfg.bench.num_threads or torch.get_num_threads()
    peaks = roofline.peaks(p.device, device_mod.device_name(p.device, p.plat),
                           p.cfg.dtype.value, threads)
    backward = p.cfg.bench.backward
    flops = w.flops_fwd + (w.flops_bwd if backward else 0.0)
    nbytes = w.bytes_fwd + (w.bytes_bwd if backward else 0.0)
    per_iteration_s = max(flops / (peaks.gflops * 1e9), nbytes / (peaks.gbps * 1e9))
    slower, others, cores = 1.0, 0.0, 0
    if p.device.type == "cpu":  # a GPU's kernels do not share the CPU's cores
        load, cores = machine_load()
        slower, others = slower_by(load, threads, cores)
    return Estimate(seconds=iterations(p) * per_iteration_s * slower, iterations=iterations(p),
                    gflop=flops / 1e9, peak_gflops=peaks.gflops, slower=slower, others=others,
                    cores=cores)
