"""`make bench` (instruction counts part): how well bench.metric=instructions repeats, gates
and what it costs, on this machine — figures for docs/instructions.md.

    python benchmarks/instructions.py [--out DIR] [--models lstm,jit,...] [--reuse]

Four sweeps of fastrnns' LSTM set (backend=aten, shape=small at seq_len 100: hidden 32,
batch 4; bench=quick), each a configuration counted under Callgrind after its timed
processes:
- A1: bench.count_processes=2; A2: one more counting process each (A/A against A1);
- B: seq_len 101 — a planted change of ~1% of the work;
- T: the same sweep with bench.metric=time (the cost of counting).
Reported: each model's count variation (relative range of its three counting processes'
medians, forward and backward); `compare A2 --against A1 --fail-on-regression 1` (A/A: must
not fire) and `compare B --against A1 --fail-on-regression 1` (planted: must fire) with how
many cells each flagged; the wall time of the counted sweeps against the timed one. Counts
are insensitive to load: the machine's load is printed, not waited for. `--reuse`: read
sweeps already in DIR instead of measuring them again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rnnexp.analysis import significance

ROOT = Path(__file__).resolve().parent.parent
MODELS = "lstm,jit,jit_premul,jit_premul_bias,jit_simple,jit_multilayer,py"
COMMON = ["backend=aten", "shape=small", "shape.seq_len=100", "bench=quick"]
SWEEPS = {"A1": ["bench.metric=instructions", "bench.count_processes=2"],
          "A2": ["bench.metric=instructions"],
          "B": ["bench.metric=instructions", "shape.seq_len=101"],
          "T": []}


def sweep(out: Path, name: str, models: str) -> float:
    start = time.perf_counter()
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{out}/mlflow.db"}
    proc = subprocess.run([sys.executable, "-m", "rnnexp", "-m", f"model={models}", *COMMON,
                           *SWEEPS[name], f"hydra.sweep.dir={out / name}"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"sweep {name} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - start


def results(folder: Path) -> dict[str, dict]:
    found = {}
    for path in folder.glob("*/results.json"):
        data = json.loads(path.read_text())
        found[data["choices"]["model"]] = data
    return found


def gate(out: Path, candidate: str) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-m", "rnnexp", "compare", str(out / candidate),
                           "--against", str(out / "A1"), "--fail-on-regression", "1"],
                          cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{out}/mlflow.db",
                               "COLUMNS": "200"})
    lines = [ln.removeprefix("error: ") for ln in (proc.stdout + proc.stderr).splitlines()]
    return proc.returncode, [ln for ln in lines
                             if ln.startswith(("regression:", "cells judged"))]


def variation(a1: dict, a2: dict, phase: str) -> float:
    medians = [*a1["instructions"]["phases"][phase]["process_medians"],
               *a2["instructions"]["phases"][phase]["process_medians"]]
    return (max(medians) - min(medians)) / min(medians)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/rnnexp-instructions-bench"))
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    walls = {}
    for name in SWEEPS:
        if not (args.reuse and (out / name).is_dir()):
            walls[name] = sweep(out, name, args.models)
            print(f"sweep {name}: {walls[name]:.0f} s (load {os.getloadavg()[0]:.1f})",
                  flush=True)
    a1, a2, b = results(out / "A1"), results(out / "A2"), results(out / "B")
    print(f"{'model':18} {'fwd instr':>12} {'fwd var %':>9} {'bwd var %':>9} "
          f"{'B/A1 fwd':>9} {'B/A1 bwd':>9} {'ns/instr':>8}")
    for model in sorted(a1):
        if model not in a2 or model not in b:
            print(f"{model:18} (not in A2 and B: --models)")
            continue
        if not a1[model].get("instructions"):
            print(f"{model:18} not counted ({a1[model]['status']}: {a1[model]['reason']})")
            continue
        ph = a1[model]["instructions"]["phases"]
        ratio = {p: b[model]["instructions"]["phases"][p]["median"] / ph[p]["median"]
                 for p in ("forward", "backward")}
        print(f"{model:18} {ph['forward']['median']:>12,.0f} "
              f"{100 * variation(a1[model], a2[model], 'forward'):>9.4f} "
              f"{100 * variation(a1[model], a2[model], 'backward'):>9.4f} "
              f"{ratio['forward']:>9.4f} {ratio['backward']:>9.4f} "
              f"{ph['total']['ns_per_instruction']:>8.3f}")
    # A/A between single processes: A1's two counting processes of each model and phase,
    # judged as compare judges one process a side.
    pairs = [significance.counts([pm[0]], [pm[1]]) for d in a1.values()
             if d.get("instructions")
             for pm in (d["instructions"]["phases"][p]["process_medians"]
                        for p in ("forward", "backward")) if len(pm) == 2]
    print(f"A/A of single processes (A1's pairs): {sum(d.real for d in pairs)} of {len(pairs)} "
          f"called different (tolerance {100 * significance.COUNT_TOLERANCE:.1f}%), "
          f"{sum(d.real and d.slowdown >= 0.01 for d in pairs)} at ≥1%")
    for name, what in (("A2", "A/A"), ("B", "planted seq 100→101")):
        code, lines = gate(out, name)
        flagged = sum(ln.startswith("regression:") for ln in lines)
        print(f"{what}: compare {name} --against A1 --fail-on-regression 1 → exit {code}, "
              f"{flagged} cells flagged")
        for ln in lines:
            if ln.startswith("cells judged"):
                print("  " + ln)
    if walls.get("T") and walls.get("A2"):
        print(f"cost: counted sweep {walls['A2']:.0f} s vs timed {walls['T']:.0f} s "
              f"({walls['A2'] / walls['T']:.1f}×)")


if __name__ == "__main__":
    main()
