"""How long a run will take, said before it starts: the work of its iterations (the model's
work count) at the device's measured roofline (rnnexp.run.roofline). A compute-bound recurrent
layer at fastrnns' default shape runs close to its GEMM peak, so this is near the real time
there, and a lower bound anywhere (small shapes are bound by per-step overhead instead)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from rnnexp.machine import device as device_mod
from rnnexp.measure import job
from rnnexp.models import work as work_mod
from rnnexp.models.workload import Work
from rnnexp.run import roofline

# Said only when a run takes longer than this: a few-second run needs no warning.
WORTH_SAYING_S = 10.0
# Work counts by model family, from the shape alone (no model is built for the estimate).
FAMILIES = {"lstm": work_mod.lstm_work, "gru": work_mod.gru_work}


@dataclass(frozen=True)
class Estimate:
    seconds: float
    iterations: int
    gflop: float  # per iteration, forward (+ backward)
    peak_gflops: float

    def line(self) -> str:
        return (f"estimate: at least ~{self.seconds:.0f} s — {self.iterations} iterations of "
                f"{self.gflop:.3g} GFLOP at this device's measured {self.peak_gflops:.3g} "
                "GFLOP/s (longer on a busy machine); shape=small bench=quick takes seconds")


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
    return Estimate(seconds=iterations(p) * per_iteration_s, iterations=iterations(p),
                    gflop=flops / 1e9, peak_gflops=peaks.gflops)
