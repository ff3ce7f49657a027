"""The spread of one model's timed iterations with no harness around them: one process, one
configuration, rnnexp's Timer under several clocks and thread settings, interleaved.

    python benchmarks/loop_spread.py [--out FILE] [--rounds 5] [--iters 20] [OVERRIDE ...]
    python benchmarks/loop_spread.py model=jit_premul backend=cudnn device=cuda

Tells a loop's own spread from what a sweep adds (worker processes, interleaving, parking):
if the loop alone is as spread as it is in a sweep, the harness is not the cause. Variants,
each visited once per round in a fresh random order, `--iters` samples a visit:

- `events`: rnnexp's clock — device events around each forward and backward, iterations
  back to back, one synchronise per sample (what a sweep times);
- `host, synchronised`: the host's clock with a synchronise before every mark;
- `events, 1 thread`: as `events` with torch's intra-op threads at 1;
- `events, synchronised at each start`: as `events` with a synchronise before the forward's
  and the backward's start marks, so no work queued earlier runs inside either.

Writes every sample, in order, as [round, forward ms, backward ms, the GPU's SM clock in MHz
after it (NVML through torch.cuda.clock_rate; None without one)] to FILE (JSON), and prints
each variant's median and IQR as a share of it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.harness import planned  # noqa: E402
from rnnexp.measure import job  # noqa: E402
from rnnexp.measure.timing import CudaEventClock, PerfCounterClock, Timer  # noqa: E402


class StartSynchronised:
    """A clock that synchronises before every other mark: the Timer marks a phase's start,
    then its end, so each start waits for whatever was queued before it."""

    def __init__(self, clock):
        self.clock, self.name, self._starts = clock, f"{clock.name}, start synchronised", True

    def arm(self, n: int) -> None:
        getattr(self.clock, "arm", lambda n: None)(n)

    def mark(self):
        if self._starts:
            self.clock.sync()
        self._starts = not self._starts
        return self.clock.mark()

    def sync(self) -> None:
        self.clock.sync()

    def elapsed_ms(self, start, end) -> float:
        return self.clock.elapsed_ms(start, end)


def clocks(device: torch.device) -> dict:
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    events = CudaEventClock(device) if device.type == "cuda" else PerfCounterClock(sync)
    return {"events": (events, None), "host, synchronised": (PerfCounterClock(sync), None),
            "events, 1 thread": (events, 1),
            "events, synchronised at each start": (StartSynchronised(events), None)}


def sm_clock(device: torch.device):
    """The GPU's SM clock in MHz now, or None (no GPU, no NVML)."""
    if device.type != "cuda":
        return None
    try:
        return torch.cuda.clock_rate(device)
    except Exception:  # NVML missing or not readable here: the figure is optional
        return None


def summary(values: list[float]) -> dict:
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return {"median_ms": round(float(med), 4),
            "iqr_pct": round(float(100 * (q3 - q1) / med), 2),
            "min_ms": round(min(values), 4), "max_ms": round(max(values), 4)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    p = planned(args.overrides)
    cfg = p.cfg
    threads = torch.get_num_threads()
    with p.backend.context():
        workload = p.backend.prepare(job.build_workload(cfg, p.spec))
        variants = clocks(p.device)
        timers = {name: Timer(workload, clock, cfg.bench.backward)
                  for name, (clock, _) in variants.items()}
        next(iter(timers.values())).warmup(args.warmup)
        samples: dict[str, list] = {name: [] for name in timers}
        rng = random.Random(0)
        for r in range(args.rounds):
            order = list(timers)
            rng.shuffle(order)
            for name in order:
                torch.set_num_threads(variants[name][1] or threads)
                for _ in range(args.iters):
                    got = timers[name].run(1)
                    samples[name].append((r, got.forward_ms[0],
                                          got.backward_ms[0] if got.backward_ms else None,
                                          sm_clock(p.device)))
        torch.set_num_threads(threads)
    result = {"overrides": args.overrides, "threads": threads, "device": str(p.device),
              "variants": {}}
    for name, rows in samples.items():
        fwd = [f for _, f, _, _ in rows]
        bwd = [b for _, _, b, _ in rows if b is not None]
        result["variants"][name] = {"forward": summary(fwd),
                                    **({"backward": summary(bwd)} if bwd else {}),
                                    "samples": rows}
        line = f"{name:20s} fwd {result['variants'][name]['forward']}"
        if bwd:
            line += f"  bwd {result['variants'][name]['backward']}"
        print(line, flush=True)
    if args.out:
        args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
