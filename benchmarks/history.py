"""`make bench` (history part): how well `rnnexp history` finds a step and `rnnexp bisect` finds
a culprit, on real replicates of this machine (benchmarks/data/history_runs.json, recorded by
benchmarks/history_record.py: short interleaved sweeps of two configurations, each measured
twice, seed=0,1, in three processes), and on real instruction counts of the same two
configurations (benchmarks/data/history_counts.json: `--metric instructions`, two counting
processes a run).

    python benchmarks/history.py [changes] [bisect] [--trials N] [--pooled K ...]
    python benchmarks/history.py --metric instructions [changes] [bisect] [--trials N]

- changes: series of real runs in the order they were measured (each configuration's runs;
  windows of WINDOW runs; again in a random order, which breaks up the machine's regimes), a
  step of 0, 2, 5 or 10% injected at a random run of each (its replicates and all later ones
  × (1 + step)). Recall (a change found within ±SLACK runs of the step) and false alarms (any
  other change) per 1000 runs, for rnnexp's method (rnnexp.analysis.history: the runs'
  replicates) beside Apache Otava's defaults on one number per run (the median of its round
  medians). Each window gets each step at REPEATS places.
- bisect: 64 environments, a 3% step at a random one; each probe is a real interleaved A/A
  pair of jobs of one sweep (which seed stands for the good end chosen at random) with the
  probe's rounds × 1.03 when it is past the step — or K such sweeps pooled (K× the
  measurement). How often the culprit is found at 95% within 10 probes, in `--trials`
  trials; and, with no step at all, how often a culprit is claimed. A row of synthetic
  probes of known standard error says what precision the target needs.

With `--metric instructions` the runs are counted runs: a run's replicates are its counting
processes' median counts of fwd+bwd, its one number the median of every counted iteration.
Counts do not move with the machine's minute-to-minute regimes, and there are fewer of them
(a counting process takes ~50 s here), so a series is WINDOW runs drawn at random, with
replacement, from a configuration's recorded runs; a bisection probe is two different
recorded runs of one configuration (the good end, the probe), judged by the count's
tolerance as `rnnexp bisect --metric instructions` judges it (significance.counts).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from rnnexp.analysis import change_points, significance
from rnnexp.analysis.bisect import Bisection, Probe, Z

DATA = {"time": Path(__file__).resolve().parent / "data" / "history_runs.json",
        "instructions": Path(__file__).resolve().parent / "data" / "history_counts.json"}
WINDOW, STRIDE, SLACK, REPEATS = 40, 5, 2, 5
DRAWN_SERIES = 12  # series a configuration's counted runs are drawn into (× REPEATS steps)
STEPS = (0.0, 0.02, 0.05, 0.10)
ENVS, STEP, MAX_PROBES = 64, 0.03, 10
console = Console(width=None if sys.stdout.isatty() else 150)


def load(metric: str, path: Path | None = None) -> dict:
    return json.loads((path or DATA[metric]).read_text())


def as_counts(job: dict) -> dict:
    """A counted run as a time run reads: its replicates and, as its one number, every
    counted iteration."""
    total = job["instructions"]["total"]
    return {"process_medians_ms": total["process_medians"], "rounds_ms": [total["samples"]]}


def streams(data: dict, counts: bool = False) -> dict[str, list[dict]]:
    """Each configuration's jobs in the order they were measured (seed 0, then 1, per sweep)."""
    out: dict[str, list[dict]] = {}
    for sweep in data["sweeps"]:
        for job in sorted(sweep["jobs"], key=lambda j: j["seed"]):
            if job["status"] == "ok" and (job.get("instructions") or not counts):
                out.setdefault(job["model"], []).append(as_counts(job) if counts
                                                        else job["total"])
    return out


def one_number(run: dict) -> float:
    """What a single-number history keeps of a run: the median of its round medians (of its
    counted iterations)."""
    values = [v for row in run["rounds_ms"] for v in row if v]
    return float(np.median(values))


def windows(runs: list[dict], drawn: bool, rng) -> list[list[dict]]:
    """The series a configuration's runs make: windows of WINDOW runs every STRIDE runs; or,
    `drawn`, as many series of WINDOW runs drawn at random with replacement."""
    if drawn:
        return [[runs[i] for i in rng.integers(0, len(runs), WINDOW)]
                for _ in range(DRAWN_SERIES)]
    return [runs[start:start + WINDOW] for start in range(0, len(runs) - WINDOW + 1, STRIDE)]


def changes(data: dict, shuffled: bool = False, seed: int = 0, counts: bool = False) -> Table:
    """Recall and false alarms; `shuffled`: each configuration's runs in a random order (the
    machine's regimes — the level moving for minutes — broken up: what is left is noise);
    `counts`: series drawn from the counted runs."""
    rng = np.random.default_rng(seed)
    # (method, step) → [steps found, steps injected, false alarms, runs]
    tally = {(m, s): [0, 0, 0, 0] for m in ("rnnexp", "otava") for s in STEPS}
    for runs in streams(data, counts).values():
        if shuffled:
            runs = [runs[i] for i in rng.permutation(len(runs))]
        for window in windows(runs, counts, rng):
            for step in [s for s in STEPS for _ in range(REPEATS)]:
                at = int(rng.integers(WINDOW // 4, 3 * WINDOW // 4))
                scale = [1 + step if i >= at else 1.0 for i in range(WINDOW)]
                reps = [[v * f for v in r["process_medians_ms"]]
                        for r, f in zip(window, scale, strict=True)]
                numbers = [one_number(r) * f for r, f in zip(window, scale, strict=True)]
                found = {"rnnexp": [i for i, _ in change_points.change_points(reps)],
                         "otava": change_points.otava_defaults(numbers)}
                for method, points in found.items():
                    t = tally[(method, step)]
                    near = [p for p in points if step and abs(p - at) <= SLACK]
                    t[0] += bool(near)
                    t[1] += bool(step)
                    t[2] += len(points) - len(near[:1])
                    t[3] += WINDOW
    order = ("instruction counts, series of runs drawn at random" if counts else
             f"time, runs {'in a random order' if shuffled else 'in the order measured'}")
    table = Table(title=f"change points on real replicates ({order}): windows of {WINDOW} "
                        f"runs, a step injected at a random run, {REPEATS} places a window "
                        f"(found = within ±{SLACK} runs)")
    for col in ("step", "method", "series", "recall", "false alarms / 1000 runs"):
        table.add_column(col, justify="right")
    for step in STEPS:
        for method, name in (("rnnexp", "rnnexp (replicates)"),
                             ("otava", "Otava defaults (one number)")):
            hits, n, fa, pts = tally[(method, step)]
            table.add_row(f"{100 * step:g}%", name, str(pts // WINDOW),
                          f"{hits}/{n} ({100 * hits / n:.0f}%)" if n else "—",
                          f"{1000 * fa / pts:.1f}")
    return table


def pairs(data: dict) -> list[tuple[list, list]]:
    """Real interleaved A/A pairs: the two seeds of one configuration in one sweep."""
    out = []
    for sweep in data["sweeps"]:
        by = {}
        for job in sweep["jobs"]:
            if job["status"] == "ok":
                by.setdefault(job["model"], {})[job["seed"]] = job["total"]["rounds_ms"]
        out += [(seeds[0], seeds[1]) for seeds in by.values() if len(seeds) == 2]
    return out


def pooled(chosen: list[tuple[list, list]], rng) -> tuple[list, list]:
    """K sweeps' pairs as one probe: each sweep's processes over rounds of their own."""
    good, probe, offset = [], [], 0
    width = sum(max(len(r) for r in a + b) for a, b in chosen)
    for a, b in chosen:
        if rng.random() < 0.5:
            a, b = b, a
        w = max(len(r) for r in a + b)
        for side, rows in ((good, a), (probe, b)):
            for row in rows:
                side.append([None] * offset + list(row) + [None] * (width - offset - len(row)))
        offset += w
    return good, probe


def real_probe(all_pairs, k: int, slower: float, rng) -> Probe:
    chosen = [all_pairs[i] for i in rng.integers(0, len(all_pairs), k)]
    good, probe = pooled(chosen, rng)
    probe = [[v * slower if v else v for v in row] for row in probe]
    return Probe(0, significance.paired(good, probe))


def counted_runs(data: dict) -> list[list[dict]]:
    """Each configuration's counted runs (two different ones make an A/A probe)."""
    return [runs for runs in streams(data, counts=True).values() if len(runs) >= 2]


def count_probe(configs: list[list[dict]], slower: float, rng, one: bool = False) -> Probe:
    """Two different counted runs of one configuration, the probe's counts × `slower`;
    `one`: a single counting process a side (one of each run's, at random), as
    `bench.count_processes=1` counts."""
    runs = configs[int(rng.integers(0, len(configs)))]
    a, b = (runs[i]["process_medians_ms"] for i in rng.choice(len(runs), 2, replace=False))
    if one:
        a, b = [a[int(rng.integers(0, len(a)))]], [b[int(rng.integers(0, len(b)))]]
    return Probe(0, significance.counts(a, [v * slower for v in b]))


def synthetic_probe(se: float, slower: float, rng) -> Probe:
    x = rng.normal(math.log(slower), se)
    return Probe(0, significance.Difference(speedup=math.exp(-x), low=math.exp(-x - Z * se),
                                            high=math.exp(-x + Z * se), p=0.05))


def trial(make_probe, step: float, rng) -> tuple[bool, bool, int]:
    """(found the culprit at 95%, claimed a wrong one, probes) within MAX_PROBES."""
    culprit = int(rng.integers(1, ENVS))
    b = Bisection(ENVS)
    while len(b.probes) < MAX_PROBES:
        m = b.next_probe()
        if m is None:
            break
        p = make_probe(1 + step if m >= culprit else 1.0)
        p.index = m
        b.observe(p)
    found, prob = b.culprit()
    claimed = bool(b.effect_is_real()) and prob >= b.confidence
    return claimed and found == culprit, claimed and (found != culprit or not step), len(b.probes)


def bisection(data: dict, trials: int, ks: list[int], seed: int = 0,
              counts: bool = False) -> Table:
    table = Table(title=f"noisy bisection: {ENVS} environments, a {100 * STEP:g}% step, at most "
                        f"{MAX_PROBES} probes, stop at P ≥ 95%")
    for col in ("probe", "its σ (log)", "step", "found in ≤ 10", "wrong culprit",
                "probes (median)"):
        table.add_column(col, justify="right")
    if counts:
        configs = counted_runs(data)
        rows = [("real counted runs (2 counting processes a side)",
                 lambda s, rng: count_probe(configs, s, rng)),
                ("real counted runs (1 counting process a side)",
                 lambda s, rng: count_probe(configs, s, rng, one=True))]
    else:
        all_pairs = pairs(data)
        rows = [(f"real A/A pairs × {k} sweep" + ("s" if k > 1 else ""),
                 lambda s, rng, k=k: real_probe(all_pairs, k, s, rng)) for k in ks]
    rows += [("synthetic (σ = 0.5%)", lambda s, rng: synthetic_probe(0.005, s, rng))]
    for name, make in rows:
        rng = np.random.default_rng(seed)
        sigma = (np.median([make(1.0, rng).se for _ in range(50)]))
        for step in (STEP, 0.0):
            rng = np.random.default_rng(seed + 1)
            results = [trial(lambda s, make=make, rng=rng: make(s, rng), step, rng)
                       for _ in range(trials)]
            found = sum(r[0] for r in results)
            wrong = sum(r[1] for r in results)
            table.add_row(name, f"{sigma:.3f}", f"{100 * step:g}%",
                          f"{found}/{trials}" if step else "—", f"{wrong}/{trials}",
                          f"{np.median([r[2] for r in results]):.0f}")
    return table


def describe(data: dict) -> str:
    sweeps = data["sweeps"]
    loads = [s["load1"] for s in sweeps]
    hours = (sweeps[-1]["at"] - sweeps[0]["at"]) / 3600
    return (f"{len(sweeps)} sweeps over {hours:.1f} h ({' '.join(data['sweep'])}); load1 at "
            f"their start {min(loads):.1f}–{max(loads):.1f} (median {np.median(loads):.1f}) "
            f"on {data['host_cores']} cores")


def count_spread(data: dict) -> str:
    """How far counts move: between a run's counting processes, and between runs (each
    run's median) of one configuration."""
    parts = []
    for model, runs in streams(data, counts=True).items():
        within = [(max(r["process_medians_ms"]) - min(r["process_medians_ms"]))
                  / np.median(r["process_medians_ms"]) for r in runs]
        levels = [np.median(r["process_medians_ms"]) for r in runs]
        between = (max(levels) - min(levels)) / np.median(levels)
        parts.append(f"{model}: {len(runs)} runs, between a run's processes median "
                     f"{100 * np.median(within):.2f}% (max {100 * max(within):.2f}%), between "
                     f"runs' medians range {100 * between:.2f}%")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", default=[], help="changes, bisect (default both)")
    parser.add_argument("--metric", choices=list(DATA), default="time",
                        help="the recorded runs: time (history_runs.json) or instructions "
                             "(history_counts.json)")
    parser.add_argument("--data", type=Path, default=None,
                        help="the recorded runs' file (default: the metric's in "
                             "benchmarks/data/)")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--pooled", type=int, nargs="+", default=[1, 8],
                        help="real sweeps pooled per probe (default 1 8; the docs' figures: "
                             "1 8 32)")
    args = parser.parse_args(argv)
    parts = args.parts or ["changes", "bisect"]
    data = load(args.metric, args.data)
    counts = args.metric == "instructions"
    console.print(f"data: {describe(data)}", highlight=False, markup=False)
    if counts:
        console.print(f"counts (fwd+bwd): {count_spread(data)}", highlight=False, markup=False)
    t0 = time.perf_counter()
    if "changes" in parts:
        if counts:
            console.print(changes(data, counts=True))
        else:
            console.print(changes(data))
            console.print(changes(data, shuffled=True))
    if "bisect" in parts:
        console.print(bisection(data, args.trials, args.pooled, counts=counts))
    console.print(f"({time.perf_counter() - t0:.0f} s)", highlight=False)


if __name__ == "__main__":
    main()
