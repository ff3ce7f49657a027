"""Record the real replicates that `benchmarks/history.py` builds its series from: many short
interleaved sweeps of two configurations, each measured twice (seed=0,1: identical work) in
three processes, one sweep after the other. Each job keeps its per-process medians and its
per-process round medians (the raw material of a history point and of a paired A/A probe).
With `--metric instructions` the same two configurations are counted instead
(`bench.metric=instructions`, two counting processes each): each job keeps every phase's
per-process counts.

    python benchmarks/history_record.py --sweeps 100 [--out benchmarks/data/history_runs.json]
    nice -n 10 python benchmarks/history_record.py --metric instructions --sweeps 12

The file is appended to sweep by sweep, so an interrupted recording keeps what it took.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rnnexp.results.result import RESULTS_FILE, Result

ROOT = Path(__file__).resolve().parent.parent
DATA = {"time": ROOT / "benchmarks" / "data" / "history_runs.json",
        "instructions": ROOT / "benchmarks" / "data" / "history_counts.json"}
# One thread: on a 2-core machine shared with other work, two OpenMP threads that spin on
# an oversubscribed core make a 0.6 ms step take hundreds of ms.
SWEEP = ["model=lstm,py", "backend=aten", "shape=small", "seed=0,1", "bench.processes=3",
         "bench.iters=40", "bench.warmup=5", "bench.num_threads=1", "bench.roofline=false",
         "bench.drift=false", "sinks=[json]"]
# Counts need no interleaving nor many timed rounds (the time is only their calibration);
# each counting process costs ~50 s here, so one seed and two counting processes a job.
COUNT_SWEEP = ["model=lstm,py", "backend=aten", "shape=small", "seed=0", "bench=quick",
               "bench.metric=instructions", "bench.count_processes=2", "bench.num_threads=1",
               "bench.roofline=false", "bench.drift=false", "sinks=[json]"]
SWEEPS = {"time": SWEEP, "instructions": COUNT_SWEEP}


def job_record(result: Result) -> dict:
    out = {"model": result.choices.get("model"), "seed": result.config.get("seed"),
           "status": result.status, "flags": result.flags}
    p = result.phase("total")  # fwd+bwd: what a history follows by default

    def short(v):
        return None if v is None else float(f"{v:.5g}")

    out["total"] = {"process_medians_ms": [short(v) for v in p.process_medians_ms
                                           or [p.median_ms]],
                    "rounds_ms": [[short(v) for v in row] for row in p.rounds_ms]}
    if result.instructions is not None:
        out["instructions"] = {name: {"process_medians": c.process_medians,
                                      "samples": c.samples}
                               for name, c in result.instructions.phases.items()}
    return out


def one_sweep(folder: Path, sweep: list[str], store: str = "") -> dict:
    started = time.time()
    load1 = os.getloadavg()[0]
    sinks = ["sinks=[json,mlflow]", f"sinks.mlflow.uri={store}"] if store else []
    if sinks:
        sweep = [o for o in sweep if not o.startswith("sinks=")]
    subprocess.run([sys.executable, "-m", "rnnexp", "-m", *sweep, *sinks,
                    f"hydra.sweep.dir={folder}"],
                   cwd=ROOT, check=True, capture_output=True)
    jobs = [job_record(Result.load(p)) for p in sorted(folder.glob(f"*/{RESULTS_FILE}"))]
    return {"at": started, "load1": load1, "wall_s": time.time() - started, "jobs": jobs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=100)
    parser.add_argument("--metric", choices=list(SWEEPS), default="time")
    parser.add_argument("--out", type=Path, help="default: benchmarks/data/history_runs.json "
                        "(time) or history_counts.json (instructions)")
    parser.add_argument("--store", default="", help="also record the runs in this MLflow "
                        "store (e.g. sqlite:///counts.db), for `rnnexp history`")
    args = parser.parse_args()
    args.out = args.out or DATA[args.metric]
    data = json.loads(args.out.read_text()) if args.out.exists() else {
        "sweep": SWEEPS[args.metric], "host_cores": os.cpu_count(), "sweeps": []}
    with tempfile.TemporaryDirectory(prefix="rnnexp-history-") as tmp:
        for n in range(args.sweeps):
            try:
                data["sweeps"].append(one_sweep(Path(tmp) / str(n), data["sweep"], args.store))
            except subprocess.CalledProcessError as err:
                print(f"sweep {n} failed: {err.stderr.decode()[-300:]}", file=sys.stderr)
                continue
            args.out.write_text(json.dumps(data, separators=(",", ":")))
            print(f"{len(data['sweeps'])} sweeps recorded", flush=True)


if __name__ == "__main__":
    main()
