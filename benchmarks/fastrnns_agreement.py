"""rnnexp beside upstream fastrnns: the same runner, shape and loop counts, measured by both.

    python benchmarks/fastrnns_agreement.py --upstream /path/above/fastrnns [--device cuda]
        [--runners cudnn aten jit] [--seq 100 --input 512 --hidden 512 --batch 64]
        [--warmup 10 --nloops 100] [--repeats 3] [--out DIR]

`--upstream` is the folder that holds a copy of PyTorch's `benchmarks/fastrnns` package (it
is run as `python -m fastrnns.bench` from there); the copy is never part of this repository.

Two parts, each repeated `--repeats` times, the two sides alternating:

1. End to end, in fresh processes: upstream's `fastrnns.bench --print-json pep` (its
   per-iteration times; on the CPU its Event shim reports seconds, converted here) against
   `python -m rnnexp` with the matching model and backend, each process's wall time beside
   its figures. Medians over iterations per process, then the median of the processes.
   For `cudnn` on a GPU also rnnexp with `backend.allow_tf32=true`: torch leaves cuDNN's
   float32 RNNs TF32 by default (`torch.backends.cudnn.rnn.fp32_precision` "tf32"), which
   upstream keeps and rnnexp pins off.
2. The timing loops alone, in one process, on one upstream-built model (so model
   construction is out of the comparison), interleaved in random order each round:
   - `upstream`: a full `gc.collect()` before the forward and again before the backward,
     four new device events per iteration, gradients zeroed in place after the backward,
     a synchronise per iteration;
   - `upstream, no gc`: the same without the two collections;
   - `upstream, grads None`: the same with gradients set to None instead of zeroed, so
     the backward allocates them instead of accumulating into them;
   - `rnnexp`: rnnexp's Timer (automatic GC off, a young-generation collection between
     samples, events made before the timed region, gradients set to None);
   - `rnnexp, host grad`: rnnexp's Timer with rnnexp's backward set-up (the upstream
     gradient drawn on the CPU from the seed and copied to the device).

Writes agreement.md and agreement.json under --out.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]

# upstream runner → (rnnexp model, backend on cuda, backend on cpu). Upstream's default
# --fuser te fuses its TorchScript loops with NNC on a GPU and not on the CPU.
RUNNERS = {"cudnn": ("lstm", "cudnn", "aten"), "aten": ("lstm", "aten", "aten"),
           "jit": ("jit", "te", "jit"), "jit_premul": ("jit_premul", "te", "jit"),
           "jit_premul_bias": ("jit_premul_bias", "te", "jit"), "py": ("py", "aten", "aten")}
PEP = re.compile(r"Caffe2Observer (\{.*\})")


@dataclass
class Side:
    """One process's figures: medians over its timed iterations, in ms, and its wall time."""

    fwd_ms: float
    bwd_ms: float
    wall_s: float
    iters: int
    # Means too: upstream reports the mean (and std), rnnexp the median.
    fwd_mean_ms: float = 0.0
    bwd_mean_ms: float = 0.0


@dataclass
class Runner:
    name: str
    upstream: list[Side] = field(default_factory=list)
    rnnexp: list[Side] = field(default_factory=list)
    # cuDNN with TF32 allowed, as torch's default leaves it for upstream (rnnexp pins it off)
    rnnexp_tf32: list[Side] = field(default_factory=list)
    loops: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def median(values) -> Optional[float]:
    values = list(values)
    return statistics.median(values) if values else None


def run_upstream(args, runner: str) -> Side:
    cmd = [sys.executable, "-m", "fastrnns.bench", "--device", args.device, "--rnns", runner,
           "--group", "rnns", "--seqLength", str(args.seq), "--numLayers", str(args.layers),
           "--inputSize", str(args.input), "--hiddenSize", str(args.hidden),
           "--miniBatch", str(args.batch), "--warmup", str(args.warmup),
           "--nloops", str(args.nloops), "--print-json", "pep"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=args.upstream, capture_output=True, text=True,
                          timeout=args.timeout, env=threads_env(args))
    wall = time.perf_counter() - t0
    fwd, bwd = [], []
    for line in proc.stdout.splitlines():
        match = PEP.search(line)
        if not match:
            continue
        record = json.loads(match.group(1))
        # Upstream's CPU Event shim measures seconds though the record says "ms".
        value = float(record["value"]) * (1000.0 if args.device == "cpu" else 1.0)
        (bwd if record["metric"] == f"lstm-backward-{runner}" else fwd).append(value)
    if proc.returncode or not fwd:  # --print-json swallows a runner's exception
        tail = (proc.stderr.strip().splitlines() or ["no figures printed"])[-1]
        raise RuntimeError(f"upstream {runner}: rc={proc.returncode}: {tail}")
    return Side(median(fwd), median(bwd), wall, len(fwd), statistics.mean(fwd),
                statistics.mean(bwd))


def run_rnnexp(args, runner: str, tf32: bool = False) -> Side:
    model, on_gpu, on_cpu = RUNNERS[runner]
    backend = on_gpu if args.device == "cuda" else on_cpu
    extra = ["backend.allow_tf32=true"] if tf32 else []
    with tempfile.TemporaryDirectory(prefix="rnnexp-agree-") as folder:
        cmd = [sys.executable, "-m", "rnnexp", f"model={model}", f"backend={backend}",
               f"device={args.device}", f"shape.seq_len={args.seq}",
               f"shape.num_layers={args.layers}", f"shape.input_size={args.input}",
               f"shape.hidden_size={args.hidden}", f"shape.batch_size={args.batch}",
               f"bench.warmup={args.warmup}", f"bench.iters={args.nloops}",
               "bench.roofline=false", "bench.memory=false", "bench.drift=false",
               "sinks=[json]", f"hydra.run.dir={folder}/run", *extra]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                              timeout=args.timeout, env=threads_env(args))
        wall = time.perf_counter() - t0
        path = Path(folder) / "run" / "results.json"
        if proc.returncode or not path.exists():
            tail = (proc.stderr.strip().splitlines() or ["no results"])[-1]
            raise RuntimeError(f"rnnexp {model}/{backend}: rc={proc.returncode}: {tail}")
        phases = json.loads(path.read_text())["phases"]
    fwd, bwd = phases["forward"], phases["backward"]
    return Side(fwd["median_ms"], bwd["median_ms"], wall, len(fwd["samples_ms"]),
                fwd["mean_ms"], bwd["mean_ms"])


def threads_env(args) -> dict:
    """Both sides with the same intra-op threads (OMP_NUM_THREADS, read by torch at start)."""
    env = dict(os.environ)
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    return env


# --- part 2: the timing loops on one model ---------------------------------------------

class Clock:
    """Device events on a GPU (made as each loop makes them), perf_counter on the CPU."""

    def __init__(self, device: str):
        import torch
        self.torch, self.cuda = torch, device == "cuda"

    def event(self):
        if self.cuda:
            return self.torch.cuda.Event(enable_timing=True)
        return _HostEvent()

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()


class _HostEvent:
    def record(self, stream=None):
        self.t = time.perf_counter()

    def elapsed_time(self, end) -> float:
        return (end.t - self.t) * 1e3


def upstream_loop(modeldef, clock: Clock, n: int, collect: bool = True,
                  zero_in_place: bool = True) -> list[tuple[float, float]]:
    """fastrnns' train_batch, step for step (bench.py), with its two choices switchable."""
    out = []
    for _ in range(n):
        events = [clock.event() for _ in range(4)]
        if collect:
            gc.collect()
        events[0].record()
        outputs = modeldef.forward(*modeldef.inputs)
        events[1].record()
        grad_args = modeldef.backward_setup(outputs)
        if collect:
            gc.collect()
        events[2].record()
        modeldef.backward(*grad_args)
        events[3].record()
        for p in modeldef.params:
            if zero_in_place:
                with clock.torch.no_grad():
                    p.grad.zero_()
            else:
                p.grad = None
        clock.sync()
        out.append((events[0].elapsed_time(events[1]), events[2].elapsed_time(events[3])))
    return out


class Steps:
    """An upstream ModelDef behind rnnexp's timing.Steps protocol."""

    def __init__(self, modeldef, setup: Optional[Callable] = None):
        self.m = modeldef
        self.has_backward = True
        self.backward_setup = setup or modeldef.backward_setup
        self.backward = modeldef.backward

    def run_forward(self):
        return self.m.forward(*self.m.inputs)

    def zero_grad(self):
        for p in self.m.params:
            p.grad = None


def host_grad_setup(outputs):
    """rnnexp's backward set-up: the upstream gradient drawn on the CPU from a seed, then
    copied to the device (rnnexp.models.workload.seeded_grad_like)."""
    import torch
    out = outputs[0]
    gen = torch.Generator().manual_seed(1)
    grad = torch.randn(out.shape, generator=gen).to(device=out.device, dtype=out.dtype)
    return out, grad


def rnnexp_loop(modeldef, device: str, n: int, warmup: int, host_grad: bool = False):
    import torch

    from rnnexp.measure.timing import Timer, clock_for
    steps = Steps(modeldef, host_grad_setup if host_grad else None)
    timer = Timer(steps, clock_for(torch.device(device)))
    timer.warmup(warmup)
    samples = timer.run(n)
    gc.unfreeze()  # the Timer froze the heap once: give the upstream loops theirs back
    return list(zip(samples.forward_ms, samples.backward_ms, strict=True))


LOOPS = ["upstream", "upstream, no gc", "upstream, grads None", "rnnexp",
         "rnnexp, host grad"]


def loops_side_by_side(args, runner: str, result: Runner) -> None:
    sys.path.insert(0, str(Path(args.upstream).resolve()))
    import torch
    from fastrnns.fuser import set_fuser
    from fastrnns.runner import get_nn_runners
    if args.threads:
        torch.set_num_threads(args.threads)
    set_fuser("te", None)  # upstream's default
    _, creator, context = get_nn_runners(runner)[0]
    clock = Clock(args.device)
    with context():
        modeldef = creator(seqLength=args.seq, numLayers=args.layers, inputSize=args.input,
                           hiddenSize=args.hidden, miniBatch=args.batch, device=args.device,
                           seed=None)
        run = {
            "upstream": lambda: upstream_loop(modeldef, clock, args.nloops),
            "upstream, no gc": lambda: upstream_loop(modeldef, clock, args.nloops,
                                                     collect=False),
            "upstream, grads None": lambda: upstream_loop(modeldef, clock, args.nloops,
                                                          zero_in_place=False),
            "rnnexp": lambda: rnnexp_loop(modeldef, args.device, args.nloops, 0),
            "rnnexp, host grad": lambda: rnnexp_loop(modeldef, args.device, args.nloops, 0,
                                                      host_grad=True),
        }
        upstream_loop(modeldef, clock, args.warmup)  # once: first-use costs for all
        rng = random.Random(0)
        for _ in range(args.repeats):
            order = list(LOOPS)
            rng.shuffle(order)
            for name in order:
                upstream_loop(modeldef, clock, max(1, args.warmup // 2), collect=False)
                samples = run[name]()
                result.loops.setdefault(name, []).append(
                    (median(f for f, _ in samples), median(b for _, b in samples)))


def report(args, runners: list[Runner]) -> str:
    unit = "ms"
    lines = [f"# rnnexp beside upstream fastrnns ({args.device})", "",
             f"shape: seq {args.seq}, layers {args.layers}, input {args.input}, hidden "
             f"{args.hidden}, batch {args.batch}; {args.warmup} warm-up + {args.nloops} timed "
             f"iterations; {args.repeats} processes a side, alternating"
             + (f"; {args.threads} thread(s)" if args.threads else ""), ""]
    lines += ["| runner | side | fwd median (" + unit + ") | bwd median (" + unit +
              ") | fwd mean | bwd mean | wall per process (s) | processes |",
              "|---|---|---|---|---|---|---|---|"]
    for r in runners:
        for side in ("upstream", "rnnexp", "rnnexp_tf32"):
            sides = getattr(r, side)
            if not sides:
                continue
            lines.append(f"| {r.name} | {side} | {median(s.fwd_ms for s in sides):.4g} | "
                         f"{median(s.bwd_ms for s in sides):.4g} | "
                         f"{median(s.fwd_mean_ms for s in sides):.4g} | "
                         f"{median(s.bwd_mean_ms for s in sides):.4g} | "
                         f"{median(s.wall_s for s in sides):.3g} | {len(sides)} |")
    if any(r.loops for r in runners):
        lines += ["", "The timing loops alone, one model, one process (median of the rounds' "
                  "medians; ratio to `upstream`):", "",
                  "| runner | loop | fwd (ms) | bwd (ms) | fwd ratio | bwd ratio |",
                  "|---|---|---|---|---|---|"]
        for r in runners:
            base = r.loops.get("upstream")
            for name in LOOPS:
                if name not in r.loops:
                    continue
                f = median(x for x, _ in r.loops[name])
                b = median(y for _, y in r.loops[name])
                bf = median(x for x, _ in base) if base else None
                bb = median(y for _, y in base) if base else None
                lines.append(f"| {r.name} | {name} | {f:.4g} | {b:.4g} | "
                             f"{f / bf:.3f} | {b / bb:.3f} |" if bf and bb else
                             f"| {r.name} | {name} | {f:.4g} | {b:.4g} | | |")
    for r in runners:
        lines += [f"- {r.name}: {e}" for e in r.errors]
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True,
                        help="the folder holding the fastrnns package (a copy of upstream's)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--runners", nargs="+", default=["cudnn", "aten", "jit"],
                        choices=sorted(RUNNERS))
    parser.add_argument("--seq", type=int, default=100)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--input", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--nloops", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    parser.add_argument("--threads", type=int, default=0,
                        help="intra-op threads for both sides (0: torch's default)")
    parser.add_argument("--no-loops", action="store_true",
                        help="skip part 2 (the timing loops in one process)")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "agreement")
    args = parser.parse_args(argv)
    if not (Path(args.upstream) / "fastrnns" / "bench.py").exists():
        parser.error(f"--upstream: no fastrnns/bench.py under {args.upstream}")
    results = []
    for name in args.runners:
        r = Runner(name)
        sides = [("upstream", run_upstream), ("rnnexp", run_rnnexp)]
        if name == "cudnn" and args.device == "cuda":
            sides.append(("rnnexp_tf32", lambda a, n: run_rnnexp(a, n, tf32=True)))
        for _ in range(args.repeats):
            for side, fn in sides:
                t0 = time.perf_counter()
                try:
                    got = fn(args, name)
                    getattr(r, side).append(got)
                    said = f"fwd {got.fwd_ms:.3f} ms, bwd {got.bwd_ms:.3f} ms"
                except (RuntimeError, subprocess.TimeoutExpired) as err:
                    r.errors.append(f"{side}: {str(err).splitlines()[0]}")
                    said = r.errors[-1]
                # As each process ends: a run cut short by a time limit says how far it got.
                print(f"{name} {side}: {said} ({time.perf_counter() - t0:.1f} s)",
                      file=sys.stderr, flush=True)
        if not args.no_loops:
            try:
                loops_side_by_side(args, name, r)
            except Exception as err:  # a runner upstream cannot build here: say so
                r.errors.append(f"loops: {type(err).__name__}: {str(err).splitlines()[0]}")
        results.append(r)
    args.out.mkdir(parents=True, exist_ok=True)
    text = report(args, results)
    (args.out / "agreement.md").write_text(text)
    (args.out / "agreement.json").write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(args).items()},
         "runners": [asdict(r) for r in results]}, indent=1))
    print(text)
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
