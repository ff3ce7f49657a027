"""`make bench`: speed goals of the harness itself, as ratios measured side by side in one run.

Goal: the timer spends little wall time outside the timed regions, and what it does there
does not disturb the timed regions. fastrnns' trainbench ran a
full `gc.collect()` before the forward and again before the backward of every iteration; that
dominated its wall time. Here both loops time the same workload in the same process,
alternating, and the ratios are printed — absolute times on a shared machine are noise.
"""

from __future__ import annotations

import argparse
import gc
import time

import torch
from rich.console import Console
from rich.table import Table

from rnnexp.models.native import lstm
from rnnexp.schema import ShapeConfig
from rnnexp.stats import summarize
from rnnexp.timing import PerfCounterClock, Samples, measure
from rnnexp.workload import Workload, WorkloadSpec


def fastrnns_style(w: Workload, warmup: int, iters: int) -> Samples:
    """fastrnns trainbench's loop: full gc.collect() before each timed phase."""
    clock, samples = PerfCounterClock(), Samples()
    for i in range(warmup + iters):
        gc.collect()
        start = clock.mark()
        out = w.run_forward()
        end = clock.mark()
        args = w.backward_setup(out)
        gc.collect()
        b_start = clock.mark()
        w.backward(*args)
        b_end = clock.mark()
        w.zero_grad()
        if i >= warmup:
            samples.forward_ms.append(clock.elapsed_ms(start, end))
            samples.backward_ms.append(clock.elapsed_ms(b_start, b_end))
    return samples


def rnnexp_loop(w: Workload, warmup: int, iters: int) -> Samples:
    return measure(w, warmup=warmup, iters=iters, clock=PerfCounterClock())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    shape = ShapeConfig(seq_len=8, input_size=32, hidden_size=32, batch_size=4)
    spec = WorkloadSpec(shape=shape, device=torch.device("cpu"), dtype=torch.float32, seed=0)
    workload = lstm(spec)

    walls: dict[str, list[float]] = {"rnnexp": [], "fastrnns": []}
    medians: dict[str, list[float]] = {"rnnexp": [], "fastrnns": []}
    for _ in range(args.rounds):  # alternate so drift hits both alike
        for name, loop in (("rnnexp", rnnexp_loop), ("fastrnns", fastrnns_style)):
            t0 = time.perf_counter()
            samples = loop(workload, 5, args.iters)
            walls[name].append(time.perf_counter() - t0)
            medians[name].append(summarize(samples.total_ms)["median_ms"])

    wall = {k: summarize(v)["median_ms"] for k, v in walls.items()}
    timed = {k: summarize(v)["median_ms"] for k, v in medians.items()}
    table = Table(title=f"harness overhead ({args.iters} iterations × {args.rounds} rounds, "
                        "nn.LSTM small, CPU)")
    table.add_column("measure")
    table.add_column("fastrnns-style / rnnexp", justify="right")
    table.add_row("wall time of the whole loop", f"{wall['fastrnns'] / wall['rnnexp']:.2f}×")
    # Not ≈1: a full collection right before a timed region evicts caches and, on a busy
    # machine, spends the time slice, so fastrnns' own samples come out inflated.
    table.add_row("median fwd+bwd sample",
                  f"{timed['fastrnns'] / timed['rnnexp']:.2f}×")
    Console().print(table)


if __name__ == "__main__":
    main()
