"""`make bench`: the harness's own speed and honesty, as ratios measured side by side in one
run (absolute times on a shared machine are noise; the inputs are printed with each ratio).

    python benchmarks/harness.py [overhead] [fastrnns] [fidelity] [aa] [compare] [spread]
        [report] [startup] [search]
    (default: all)

- overhead: per-job overhead inside a sweep with MLflow on — the sweep's wall time minus the
  jobs' own work (timed samples, warm-up, verification), per job, from two sweeps of N1 and
  N2 jobs (the difference removes the once-per-sweep start-up); against the timed work.
  Swept over seeds (values) and over models (a config group), which differ in how often
  the config is composed. `--baseline PATH` adds the same sweeps run from another
  checkout, interleaved.
- fastrnns: wall time of fastrnns' 7-runner RNN set on the CPU (seq 20, input 128, hidden
  128, batch 16, 10 warm-up + 100 timed iterations: aten, py and the five jit* loops, which
  upstream scripts under the profiling executor with no CPU fusion — rnnexp's backend=aten
  does the same, so the set is one sweep) with bench=default against bench=adaptive, MLflow
  on (each variant its own store, made before timing, as a user's store exists): wall time,
  timed work, overhead per job ((wall − timed work) ÷ jobs), each job's time to its result,
  and the precision each claims. `--upstream PATH` runs upstream's own `fastrnns.bench`
  (PATH holds its `fastrnns` package) beside them, round by round; `--baseline PATH` adds
  the fixed sweep run from another checkout.
- fidelity: rnnexp's timer against torch.utils.benchmark.Timer.blocked_autorange on the same
  callables (an nn.LSTM forward and the microsecond eltwise tail), interleaved.
- aa: A/A coverage of the between-process interval: a configuration measured with
  bench=adaptive, then re-run in fresh single processes; how often a rerun's median lands
  inside the interval the first run reported (the interval's promise is ~95%), and inside the
  interval the same process medians give without the drift between earlier runs
  (rnnexp.run.drift; every run here adds to that history).
- compare: whether rnnexp.analysis.compare tells identical work from a real difference on this
  machine, with default settings (`--processes K` sets bench.processes instead, `--iters N`
  bench.iters, `--malloc system` bench.malloc), over
  `--trials` repetitions of: (a) A/A interleaved — one sweep of two seeds of the same
  configuration (identical work), compared with `--baseline seed=0`; (b) A/A apart — two
  one-job sweeps of it run one after the other, compared run against run with `--against`;
  (c) power — one interleaved sweep of shape.seq_len=20,21 of it (5% more work, exactly,
  by the work counts), and one of nn.LSTM at shape.seq_len=100,105, both sides of each in
  shared workers, paired process by process, each with `--baseline` the shorter
  (`--planted-only`: these two alone). It counts cells flagged and gate alarms
  (`--fail-on-regression 5`) for the A/As (α promises ≤ 5%), and for the planted slowdown how
  often it is found and how often the interval covers the work counts' ratio, with each
  sweep's wall time, the spread between processes of the paired differences, and the
  load. The drift history starts empty (a cache of its own): early trials apart can only
  say "cannot tell".
- spread: the IQR/median of a launch-bound TorchScript loop's samples (jit_premul at the
  fastrnns shape) measured alone and in a window of the five jit* loops, in this checkout
  and, with `--baseline PATH`, in another one (before a change), with OpenMP's passive wait
  policy (OMP_WAIT_POLICY=PASSIVE), one intra-op thread, and pinned to one core (taskset),
  interleaved over `--rounds` rounds.
- report: the HTML report of `--cells` cells — its cost at a sweep's end beside the
  summary's, its size, and how fast it opens in headless Chromium (benchmarks/report_bench.py).
- startup: the help page, a command line's error and `compare`'s argument error against the
  floor they all pay and torch's import, fresh processes in turn (benchmarks/startup_bench.py).
- search: `rnnexp search` replayed over a recorded 120-cell grid (benchmarks/search_bench.py,
  benchmarks/data/): over `--seeds` seeds, how often it lands within 3% of the grid's best
  with 10% of the cells, beside Optuna's default sampler and random search.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional, Sequence

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from rnnexp.app import config_check
from rnnexp.config import kernel_plugins, schema
from rnnexp.measure import job
from rnnexp.measure.timing import PerfCounterClock, Timer, block_for
from rnnexp.results import cache, stats
from rnnexp.results.result import RESULTS_FILE, Result, TimingInfo
from rnnexp.run import execution

console = Console(width=None if sys.stdout.isatty() else 150)
ROOT = Path(__file__).resolve().parent.parent
SHAPE = ["shape.seq_len=20", "shape.input_size=128", "shape.hidden_size=128",
         "shape.batch_size=16"]
# fastrnns' RNN set on a CPU: its aten runner is model=lstm under backend=aten; py is eager
# Python (never scripted), the jit* loops are TorchScripted — upstream under the profiling
# executor with no fusion on the CPU, as backend=aten scripts them: one sweep, one block.
LOOPS = ["jit", "jit_premul", "jit_premul_bias", "jit_simple", "jit_multilayer"]
FASTRNNS_SET = [[f"model={','.join(['lstm', 'py', *LOOPS])}", "backend=aten", *SHAPE]]
UPSTREAM_RUNNERS = ["aten", "py", *LOOPS]
UPSTREAM_ARGS = ["--device", "cpu", "--group", "rnns", "--seqLength", "20", "--inputSize", "128",
                 "--hiddenSize", "128", "--miniBatch", "16", "--nloops", "100", "--warmup", "10"]


PARTS = ("overhead", "fastrnns", "fidelity", "aa", "compare", "spread", "report", "startup",
         "search")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f} on {os.cpu_count()} CPUs"


# --- sweeps through the real CLI ----------------------------------------------------------

def sweep(overrides: Sequence[str], folder: Path, root: Path = ROOT,
          store: Optional[Path] = None, env: Optional[dict] = None,
          prefix: Sequence[str] = ()) -> tuple[float, list[Result]]:
    """Run `python -m rnnexp -m ...` from checkout `root` with MLflow on (the SQLite store
    `store`, by default a new one in `folder`), with `env` added to the environment and the
    command behind `prefix` (e.g. taskset); (wall seconds, results)."""
    folder.mkdir(parents=True, exist_ok=True)
    store = (store or folder / "mlflow.db").resolve()
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONWARNINGS": "ignore",
           "MLFLOW_TRACKING_URI": f"sqlite:///{store}", **(env or {})}
    cmd = [*prefix, sys.executable, "-m", "rnnexp", "-m", *overrides,
           f"hydra.sweep.dir={folder.resolve()}/sweep"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"error: sweep failed ({' '.join(overrides)}): "
                         f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    results = [Result.load_checked(p)
               for p in sorted((folder / "sweep").glob(f"*/{RESULTS_FILE}"))]
    return wall, results


def timed_s(result: Result) -> float:
    """Seconds of timed samples (each sample is the mean of `block` iterations)."""
    timing = result.timing or TimingInfo()
    if timing.timed_s is not None:
        return float(timing.timed_s)
    total = sum(sum(result.phase(p).samples_ms) for p in ("forward", "backward"))
    return total / 1e3 * int(timing.block or 1)


def work_s(result: Result) -> float:
    """The job's own work: timed samples, warm-up — the backend's untimed first runs
    included — and verification (as far as the result records them)."""
    timing, backend = result.timing or TimingInfo(), result.backend.details
    return timed_s(result) + float(timing.warmup_s or 0) + float(timing.verify_s or 0) \
        + sum(float(backend.get(k) or 0) for k in ("first_call_s", "optimize_s"))


# Loop models a jit sweep can take as its config-group axis (each job its own choice).
LOOP_MODELS = ["jit", "jit_premul", "jit_premul_bias", "jit_simple", "jit_multilayer",
               "jit_gru", "jit_dropout", "jit_layernorm"]


def overhead(n1: int, n2: int, tmp: Path, rounds: int = 1,
             baseline: Optional[Path] = None) -> None:
    """Two axes: seeds (values) and models (a config group: every job its own choice).
    With several rounds, the median per-job overhead and the range of the rounds; with a
    baseline checkout, its sweeps interleaved with this one's, round by round."""
    base = ["backend=jit", "backend.executor=simple", "shape=small", "bench=quick"]
    axes = [("seeds", lambda n: ["model=jit", f"seed=range(0,{n})"])]
    if n2 <= len(LOOP_MODELS):
        axes.append(("models", lambda n: [f"model={','.join(LOOP_MODELS[:n])}"]))
    checkouts = [("this checkout", ROOT)] + ([(str(baseline), baseline)] if baseline else [])
    table = Table(title=f"per-job overhead in a sweep, MLflow on ({rounds} round(s); {load()})")
    for col in ("inputs", "checkout", "per-job overhead", "÷ this checkout",
                "timed work per job", "overhead / timed", "once per sweep"):
        table.add_column(col, justify="right")
    for axis, swept in axes:
        per_job = {name: [] for name, _ in checkouts}
        startup = {name: [] for name, _ in checkouts}
        timed = {name: [] for name, _ in checkouts}
        walls = {name: [] for name, _ in checkouts}
        for r in range(rounds):
            for c, (name, root) in enumerate(checkouts):
                runs = {}
                for n in (n1, n2):  # n distinct jobs, each in its own worker process
                    wall, results = sweep([*base, *swept(n)],
                                          tmp / f"overhead_{axis}{n}_{r}_{c}", root)
                    runs[n] = (wall, sum(work_s(x) for x in results),
                               sum(timed_s(x) for x in results))
                (w1, k1, t1), (w2, k2, t2) = runs[n1], runs[n2]
                per_job[name].append(((w2 - k2) - (w1 - k1)) / (n2 - n1))
                startup[name].append((w1 - k1) - n1 * per_job[name][-1])
                timed[name].append((t2 - t1) / (n2 - n1))
                walls[name].append(f"{w1:.1f}/{w2:.1f} s")
        ref = float(np.median(per_job[checkouts[0][0]]))
        for name, _ in checkouts:
            job = float(np.median(per_job[name]))
            spread = f"{min(per_job[name]):.2f}–{max(per_job[name]):.2f}"
            timed_per_job = float(np.median(timed[name]))
            inputs = f"{' '.join([*base, *swept(n2)])}; sweeps of {n1} and {n2} jobs, " \
                if name == checkouts[0][0] else ""
            table.add_row(f"{inputs}walls {', '.join(walls[name])}", name,
                          f"{job:.2f} s" + (f" ({spread})" if rounds > 1 else ""),
                          f"{job / ref:.2f}×" if ref > 0 else "—",
                          f"{timed_per_job:.3f} s",
                          f"{job / timed_per_job:.1f}×" if timed_per_job > 0 else "—",
                          f"{float(np.median(startup[name])):.1f} s")
    console.print(table)


def measuring_s(result: Result) -> float:
    """A job's time to its result: from its first process's start to its last one's end
    (builds, verification, warm-ups, timed samples), without the sweep around it; NaN where
    the result does not record it (an older checkout)."""
    value = result.timing.measure_s if result.timing else None
    return float("nan") if value is None else float(value)


def claimed(result: Result) -> float:
    """The relative half-width of the interval a result claims for fwd+bwd: between
    processes if it has one, else its median's within-process 95% interval."""
    total = result.phase("total")
    median = total.median_ms
    low, high = total.between_low_ms, total.between_high_ms
    if low is None or high is None:
        low, high = total.median_ci_low_ms, total.median_ci_high_ms
    if not median or low is None or high is None:
        return float("nan")
    return (high - low) / 2 / median


def new_store(path: Path) -> Path:
    """An MLflow SQLite store with its schema made (untimed): a user's store exists already,
    and making one costs ~0.9 s once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", "from mlflow.tracking import MlflowClient; "
                    f"MlflowClient(tracking_uri='sqlite:///{path.resolve()}')"
                    ".search_experiments()"], check=True, capture_output=True)
    return path


def upstream_run(path: Path) -> float:
    """Upstream's `python -m fastrnns.bench` of the same set; its wall seconds."""
    cmd = [sys.executable, "-m", "fastrnns.bench", *UPSTREAM_ARGS, "--rnns", *UPSTREAM_RUNNERS]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"error: upstream fastrnns failed in {path}: "
                         f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return wall


def fastrnns(rounds: int, tmp: Path, baseline: Optional[Path], upstream: Optional[Path]
             ) -> None:
    # Upstream's count of timed iterations (rnnexp's default times 300): the same work.
    upstream_count = ["bench=default", "bench.iters=100"]
    variants = [("fixed (bench=default)", ROOT, upstream_count),
                ("adaptive (bench=adaptive)", ROOT, ["bench=adaptive"])]
    if baseline is not None:
        variants.insert(0, (f"fixed, {baseline}", baseline, upstream_count))
    walls = {name: [] for name, _, _ in variants}
    results = {name: [] for name, _, _ in variants}
    loads: list[str] = []
    up: list[float] = []
    stores = [new_store(tmp / f"store{i}" / "mlflow.db") for i in range(len(variants))]
    for r in range(rounds):  # alternate, so drift hits every variant alike
        if upstream is not None:
            up.append(upstream_run(upstream))
        for i, (name, root, extra) in enumerate(variants):
            wall = 0.0
            for j, overrides in enumerate(FASTRNNS_SET):
                w, res = sweep([*overrides, *extra], tmp / f"fastrnns{r}_{i}_{j}", root,
                               stores[i])
                wall += w
                results[name].extend(res)
            walls[name].append(wall)
        loads.append(load())
    fixed = "fixed (bench=default)"
    ref = float(np.median(up)) if up else float(np.median(walls[fixed]))
    jobs = len(results[fixed]) // rounds
    table = Table(title=f"fastrnns set ({jobs} jobs, MLflow on; {rounds} round(s), "
                        f"interleaved; loads {', '.join(loads)})")
    for col in ("variant", "wall time", "÷ " + ("upstream" if up else "fixed"), "timed work",
                "overhead per job", "measuring per job", "claimed ± (median job)",
                "interval kind", "processes", "stopped"):
        table.add_column(col, justify="right")
    if up:
        table.add_row(f"upstream fastrnns.bench ({upstream})", f"{ref:.1f} s", "1.00×",
                      "—", "—", "—", "—", "—", "1", "—")
    for name, _, _ in variants:
        res = results[name]
        wall = float(np.median(walls[name]))
        timed = sum(timed_s(r) for r in res) / rounds
        seconds = np.array([measuring_s(r) for r in res])
        between = any(r.phase("total").between_low_ms is not None for r in res)
        stops = sorted({(r.timing.stopped if r.timing else "") or "iters" for r in res})
        procs = sorted({r.timing.processes if r.timing else 1 for r in res})
        table.add_row(name, f"{wall:.1f} s", f"{wall / ref:.2f}×", f"{timed:.1f} s",
                      f"{(wall - timed) / jobs:.2f} s",
                      f"{float(np.nanmedian(seconds)):.2f} s" if np.isfinite(seconds).any()
                      else "—",
                      f"±{100 * float(np.nanmedian([claimed(r) for r in res])):.1f}%",
                      "new run, between processes" if between else "median, one process",
                      ",".join(map(str, procs)), ",".join(stops))
    console.print(table)


# --- in this process ------------------------------------------------------------------------

def planned(overrides: Sequence[str]) -> job.Plan:
    schema.register(with_deepbench=False)  # storing DeepBench's problems: 0.19 s a call
    kernel_plugins.register()
    (cfg,) = config_check.check(list(overrides), multirun=False)
    choices = dict(o.split("=", 1) for o in overrides if "." not in o.split("=", 1)[0])
    return job.plan(cfg, choices, list(overrides))


def fidelity(rounds: int) -> None:
    """Our Timer and torch.utils.benchmark.Timer on the same forward, alternating."""
    from torch.utils import benchmark

    table = Table(title=f"timer fidelity: rnnexp Timer vs torch.utils.benchmark.Timer "
                        f"({rounds} rounds, interleaved; {load()})")
    for col in ("callable", "rnnexp median", "torch median", "rnnexp / torch", "block"):
        table.add_column(col, justify="right")
    for label, overrides in (("nn.LSTM forward, fastrnns shape",
                              ["model=lstm", "backend=aten", "device=cpu", *SHAPE]),
                             ("eltwise forward, 16×128", ["model=eltwise", "backend=aten",
                                                          "device=cpu", *SHAPE])):
        p = planned([*overrides, "bench.backward=false"])
        with p.backend.context():
            w = p.backend.prepare(job.build_workload(p.cfg, p.spec))
            ours, theirs = [], []
            timer = Timer(w, PerfCounterClock(), backward=False)
            block = block_for(timer.warmup(20), 1.0)
            # torch's Timer runs on one thread unless told: give it the threads ours uses.
            reference = benchmark.Timer("with torch.no_grad(): w.run_forward()",
                                        globals={"w": w, "torch": torch},
                                        num_threads=torch.get_num_threads())
            for _ in range(rounds):
                ours.append(stats.median(timer.run(30, block=block).forward_ms))
                theirs.append(reference.blocked_autorange(min_run_time=0.2).median * 1e3)
        a, b = float(np.median(ours)), float(np.median(theirs))
        table.add_row(label, f"{a:.4f} ms", f"{b:.4f} ms", f"{a / b:.3f}", str(block))
    console.print(table)


def aa(trials: int, reruns: int, overrides: Sequence[str]) -> None:
    """A/A: measure with bench=adaptive, then rerun in fresh single processes; count the
    reruns whose fwd+bwd median lands inside the first run's between-process interval —
    apart for first runs that knew the configuration's drift between runs (rnnexp.run.drift) and
    those that did not yet, and side by side with the interval the same process medians give
    without the drift. The history starts empty (a cache of its own), so the first trial
    shows a configuration's first run and the later ones what its earlier runs teach."""
    counts = {True: [0, 0, 0], False: [0, 0, 0]}  # drift known → inside, inside without, all
    widths, drifts = [], []
    with tempfile.TemporaryDirectory(prefix="rnnexp-aa-") as cache, own_cache(Path(cache)):
        for _ in range(trials):
            first: Result = execution.execute(planned([*overrides, "bench=adaptive"]))
            t, env = first.phase("total"), first.environment
            known = env.drift is not None
            within = stats.between_processes(t.process_medians_ms)
            if known:
                widths.append((t.between_high_ms - t.between_low_ms) / 2 / t.median_ms)
                drifts.append(f"±{100 * env.drift:.1f}% ({env.drift_runs} runs)")
            for _ in range(reruns):
                again = execution.execute(planned([
                    *overrides, "bench=adaptive", "bench.processes=1",
                    "bench.max_processes=1", "bench.precision=null", "bench.iters=20",
                    "bench.verify=false"]))
                median = again.phase("total").median_ms
                tally = counts[known]
                tally[0] += t.between_low_ms <= median <= t.between_high_ms
                tally[1] += within["low_ms"] <= median <= within["high_ms"]
                tally[2] += 1
    table = Table(title=f"A/A coverage of the between-process interval: "
                        f"{' '.join(overrides)} ({load()})")
    for col in ("first runs", "inside", "without drift: inside",
                "claimed ± (median)", "drift (first … last)"):
        table.add_column(col, justify="right")
    for known, (inside, without, total) in counts.items():
        if not total:
            continue
        table.add_row(f"{total // reruns} × {reruns} reruns, drift "
                      + ("known" if known else "not yet known"),
                      share(inside, total), share(without, total),
                      f"±{100 * float(np.median(widths)):.1f}%" if known and widths else "—",
                      f"{drifts[0]} … {drifts[-1]}" if known and drifts else "—")
    console.print(table)


@contextlib.contextmanager
def own_cache(folder: Path) -> Iterator[None]:
    """rnnexp's cache (the drift history, the roofline) in `folder` while inside: this
    process's runs and the sweeps it starts begin with no history of their own."""
    previous = os.environ.get(cache.CACHE_ENV)
    os.environ[cache.CACHE_ENV] = str(folder)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(cache.CACHE_ENV, None)
        else:
            os.environ[cache.CACHE_ENV] = previous


def share(n: int, of: int) -> str:
    return f"{n}/{of} ({100 * n / of:.0f}%)" if of else "—"


GATE_PCT = 5.0
COMPARED = ["model=jit", "backend=aten", "device=cpu", *SHAPE, "sinks=[json]"]


def judged(candidate: Path, baseline: Optional[Path] = None, key: str = "", value: str = ""
           ) -> tuple[dict, list[str]]:
    """compare's cells and gate alarms for a sweep folder, against another sweep or a
    baseline value of `key`, as `python -m rnnexp compare` makes them."""
    from rnnexp.analysis import compare, significance, sweeps

    runs = sweeps.from_folder(candidate).runs
    bases = (compare.baselines_across(runs, sweeps.from_folder(baseline).runs) if baseline
             else compare.baselines_within(runs, key, value))
    cells = compare.judge(runs, bases, significance.MIN_EFFECT, GATE_PCT / 100)
    return cells, compare.regressions(runs, cells, GATE_PCT)


def process_spread(folder: Path, key: str, value: str) -> list[float]:
    """σ of the per-process paired differences (log) of each cell of an interleaved sweep
    whose sides shared their processes: the spread between processes the process-level
    interval stands on."""
    from rnnexp.analysis import compare, significance, sweeps

    runs = sweeps.from_folder(folder).runs
    out = []
    for run, base in zip(runs, compare.baselines_within(runs, key, value), strict=True):
        if base is None or base is run:
            continue
        for phase in ("fwd", "bwd"):
            a, b = base.side(phase), run.side(phase)
            if not significance.shared(a, b) or len(a.workers) < 2:
                continue
            width = max(len(r) for r in (*a.rounds_ms, *b.rounds_ms))
            la, lb, _ = significance.process_levels(
                significance.log_matrix(a.rounds_ms, width),
                significance.log_matrix(b.rounds_ms, width),
                list(zip(np.argsort(a.workers), np.argsort(b.workers), strict=True)))
            out.append(float(np.std(la - lb, ddof=1)))
    return out


# The planted 5% on nn.LSTM beside `jit`'s: both sides of each share worker processes (a
# scripted loop scripts a class of its own per configuration) and pair process by process.
# nn.LSTM at seq 100 → 105: at 20 → 21 its fixed cost a call (oneDNN's weight reorders) makes
# 5% more work about 3% more time.
SHARED_PLANT = ["model=lstm", "backend=aten", "device=cpu", "shape.input_size=128",
                "shape.hidden_size=128", "shape.batch_size=16", "sinks=[json]"]


def comparisons(trials: int, tmp: Path, processes: Optional[int] = None,
                planted_only: bool = False, iters: Optional[int] = None,
                malloc: Optional[str] = None) -> None:
    """A/A interleaved, A/A apart and a planted 5% slowdown (on `jit` and on nn.LSTM),
    `trials` times each (`planted_only`: the planted slowdowns alone)."""
    extra = [*([f"bench.processes={processes}"] if processes else []),
             *([f"bench.iters={iters}"] if iters else []),
             *([f"bench.malloc={malloc}"] if malloc else [])]
    compared = [*COMPARED, *extra]
    plants = {"+5% work on jit, interleaved": (compared, (20, 21)),
              "+5% work on nn.LSTM, interleaved": ([*SHARED_PLANT, *extra], (100, 105))}
    tally = {name: {"cells": 0, "flagged": 0, "alarms": 0, "runs": 0, "walls": [],
                    "found": 0, "covered": 0, "undecided": 0, "widths": [], "spread": [],
                    "busy": 0}
             for name in ("A/A interleaved", "A/A apart", *plants)}
    loads = []
    with own_cache(tmp / "cache"):  # a drift history of its own
        for t in range(trials):
            folder = tmp / f"compare-{t}"
            for p, (name, (overrides, (short, long))) in enumerate(plants.items()):
                planted = [o for o in overrides if not o.startswith("shape.seq_len=")]
                out = folder / f"power{p}"
                wall, results = sweep([*planted, f"shape.seq_len={short},{long}"], out)
                cells, alarms = judged(out / "sweep", key="shape.seq_len", value=str(short))
                works = {r.config["shape"]["seq_len"]: r.work.flops_fwd
                         for r in results if r.work}
                true = works[short] / works[long]  # the speedup the extra work makes: 1/1.05
                power = tally[name]
                record(power, wall, cells, alarms)
                power["spread"] += process_spread(out / "sweep", "shape.seq_len", str(short))
                power["found"] += any(d.verdict == "slower" for d in cells.values())
                power["covered"] += sum(d.low <= true <= d.high for d in cells.values())
            loads.append(load())
            if planted_only:
                console.print(f"trial {t + 1}/{trials} done ({loads[-1]})", highlight=False)
                continue
            wall, _ = sweep([*compared, "seed=0,1"], folder / "aa")
            record(tally["A/A interleaved"], wall, *judged(folder / "aa" / "sweep",
                                                           key="seed", value="0"))
            tally["A/A interleaved"]["spread"] += process_spread(folder / "aa" / "sweep",
                                                                 "seed", "0")
            walls = [sweep([*compared, "seed=0"], folder / name)[0] for name in ("a", "b")]
            record(tally["A/A apart"], sum(walls),
                   *judged(folder / "b" / "sweep", baseline=folder / "a" / "sweep"))
            console.print(f"trial {t + 1}/{trials} done ({loads[-1]})", highlight=False)
    table = Table(title=f"compare on this machine: {' '.join(compared)}, gate "
                        f"--fail-on-regression {GATE_PCT:g} (loads {'; '.join(loads)})")
    for col in ("check", "cells flagged", "cannot tell", "busy cells", "gate alarms",
                "runs found (slower)", "interval covers 1/1.05", "interval ± (median)",
                "σ between processes (median)", "wall per answer (median)"):
        table.add_column(col, justify="right")
    for name, t in tally.items():
        power = name.startswith("+")
        if not t["runs"]:
            continue  # not run (--planted-only)
        table.add_row(name, share(t["flagged"], t["cells"]), share(t["undecided"], t["cells"]),
                      share(t["busy"], t["cells"]), share(t["alarms"], t["runs"]),
                      share(t["found"], t["runs"]) if power else "—",
                      share(t["covered"], t["cells"]) if power else "—",
                      f"±{100 * float(np.median(t['widths'])):.1f}%" if t["widths"] else "—",
                      f"{100 * float(np.median(t['spread'])):.2f}%" if t["spread"] else "—",
                      f"{float(np.median(t['walls'])):.1f} s" if t["walls"] else "—")
    console.print(table)


def record(t: dict, wall: float, cells: dict, alarms: list[str]) -> None:
    t["walls"].append(wall)
    t["cells"] += len(cells)
    t["flagged"] += sum(d.real for d in cells.values())
    t["undecided"] += sum(d.verdict == "?" for d in cells.values())
    t["busy"] += sum("busy machine" in d.why_not for d in cells.values())
    t["widths"] += [d.half_width for d in cells.values() if np.isfinite(d.half_width)]
    t["runs"] += 1
    t["alarms"] += bool(alarms)


SPREAD_SHAPE = [*SHAPE, "sinks=[json]"]


def spread_of(results: list[Result], model: str = "jit_premul") -> float:
    """IQR/median of the model's fwd+bwd samples."""
    (r,) = [r for r in results if r.choices.get("model") == model]
    total = r.phase("total")
    return total.iqr_ms / total.median_ms


def spread(rounds: int, tmp: Path, baseline: Optional[Path]) -> None:
    """The loop's spread alone and in a window, before and after, and what changes it."""
    alone = ["model=jit_premul", "backend=jit", *SPREAD_SHAPE]
    window = [f"model={','.join(LOOPS)}", "backend=jit", *SPREAD_SHAPE]
    one_core = ["taskset", "-c", "0"]
    variants = [("alone", ROOT, alone, {}, ()),
                ("in a window of 5", ROOT, window, {}, ()),
                ("in a window, OMP_WAIT_POLICY=PASSIVE", ROOT, window,
                 {"OMP_WAIT_POLICY": "PASSIVE"}, ()),
                ("in a window, 1 thread", ROOT, [*window, "bench.num_threads=1"], {}, ()),
                ("in a window, 1 thread pinned to core 0", ROOT,
                 [*window, "bench.num_threads=1"], {}, one_core)]
    if baseline is not None:
        variants += [(f"alone, {baseline}", baseline, alone, {}, ()),
                     (f"in a window, {baseline}", baseline, window, {}, ()),
                     (f"in a window, {baseline}, OMP_WAIT_POLICY=PASSIVE", baseline, window,
                      {"OMP_WAIT_POLICY": "PASSIVE"}, ())]
    found: dict[str, list[float]] = {name: [] for name, *_ in variants}
    loads = []
    for r in range(rounds):
        for i, (name, root, overrides, env, prefix) in enumerate(variants):
            _, results = sweep(overrides, tmp / f"spread{r}_{i}", root, env=env, prefix=prefix)
            found[name].append(spread_of(results))
        loads.append(load())
    table = Table(title=f"spread of jit_premul (fastrnns shape, backend=jit): IQR / median of "
                        f"its fwd+bwd samples, {rounds} round(s) (loads {'; '.join(loads)})")
    for col in ("variant", "IQR / median (median)", "rounds"):
        table.add_column(col, justify="right")
    for name, values in found.items():
        table.add_row(name, f"{100 * float(np.median(values)):.1f}%",
                      ", ".join(f"{100 * v:.0f}%" for v in values))
    console.print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", default=[],
                        help=f"any of: {' '.join(PARTS)} (default: all)")
    parser.add_argument("--jobs", type=int, nargs=2, default=[2, 8], metavar=("N1", "N2"),
                        help="overhead: the two sweep sizes (default 2 8)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="overhead, fastrnns, spread: rounds (medians are reported)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="overhead, fastrnns, spread: also run the sweeps (fastrnns: the "
                             "fixed one) from this checkout, interleaved")
    parser.add_argument("--upstream", type=Path, default=None,
                        help="fastrnns: the folder holding upstream's fastrnns package, run "
                             "beside rnnexp (python -m fastrnns.bench)")
    parser.add_argument("--trials", type=int, default=4,
                        help="aa: first runs; compare: repetitions of each check")
    parser.add_argument("--reruns", type=int, default=5, help="aa: reruns per first run")
    parser.add_argument("--planted-only", action="store_true",
                        help="compare: the planted slowdowns alone, without the A/As")
    parser.add_argument("--processes", type=int, default=None,
                        help="compare: bench.processes (default: the configuration's)")
    parser.add_argument("--iters", type=int, default=None,
                        help="compare: bench.iters (default: the configuration's)")
    parser.add_argument("--malloc", choices=[p.value for p in schema.MallocPolicy], default=None,
                        help="compare: bench.malloc (default: the configuration's)")
    parser.add_argument("--cells", type=int, default=1000, help="report: cells (default 1000)")
    parser.add_argument("--seeds", type=int, default=20, help="search: replayed searches "
                        "per sampler (default 20)")
    parser.add_argument("--loads", type=int, default=5,
                        help="report: times each report is opened in Chromium")
    args = parser.parse_args(argv)
    parts = args.parts or list(PARTS)
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part {', '.join(unknown)} — choose from {', '.join(PARTS)}")
    if args.upstream is not None and not (args.upstream / "fastrnns" / "bench.py").is_file():
        parser.error(f"--upstream {args.upstream}: no fastrnns/bench.py there — the folder "
                     "that holds upstream's fastrnns package")
    console.print(f"rnnexp bench · torch {torch.__version__} · {os.cpu_count()} CPUs · "
                  f"{time.strftime('%Y-%m-%d %H:%M %Z')} · {load()}", highlight=False)
    with tempfile.TemporaryDirectory(prefix="rnnexp-bench-") as tmp:
        if "overhead" in parts:
            overhead(*args.jobs, Path(tmp), args.rounds, args.baseline)
        if "fastrnns" in parts:
            fastrnns(args.rounds, Path(tmp), args.baseline, args.upstream)
        if "spread" in parts:
            spread(args.rounds, Path(tmp), args.baseline)
    if "fidelity" in parts:
        fidelity(rounds=5)
    if "aa" in parts:
        aa(args.trials, args.reruns, ["model=jit", "backend=jit", "backend.executor=simple",
                                      "device=cpu", *SHAPE])
    if "compare" in parts:
        with tempfile.TemporaryDirectory(prefix="rnnexp-bench-") as tmp:
            comparisons(args.trials, Path(tmp), args.processes, args.planted_only,
                        args.iters, args.malloc)
    if "report" in parts:
        from report_bench import report

        report(args.cells, args.loads)
    if "startup" in parts:
        from startup_bench import startup

        startup()
    if "search" in parts:
        from search_bench import report as search_report

        search_report(args.seeds)


if __name__ == "__main__":
    main()
