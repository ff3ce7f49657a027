"""`make bench` part `search`: does `rnnexp search` find the grid's best without measuring
the grid?

- `record` (once, ~1 h on a loaded 2-core machine): every cell of GRID measured as the search
  measures — windows of WINDOW cells and the baseline, interleaved, through the search's own
  adapter (rnnexp.app.search.window.measure); cells the plan refuses are recorded with their
  reason unmeasured. Each cell's per-process round medians (and its window baseline's), its
  peak memory, time to first result, status and reason go to DATA (gzip JSON, resumable:
  recorded cells are kept).
- `replay` (the part `make bench` runs): the recording as a simulator
  (rnnexp.app.search.replay: each cell replays its recorded values, paired with its window's
  baseline; refusals and failed verifications are failed constraints), and the search run
  over it for `--seeds` seeds with a budget of 10% of the grid's cells, beside Optuna's
  default sampler and random search on the same budget: how often each lands within 3% of
  the grid's best, how far off it lands, and how many cells it measured.
"""

from __future__ import annotations

import gzip
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "search_grid.json.gz"
# 5 formulations × 6 backends (TorchScript's 3 executors folded into jit; te refused on a
# build without LLVM) × 2 dtypes × 2 thread counts = 120 cells, at a small shape.
GRID = ["model=lstm,jit,jit_premul,jit_premul_bias,jit_simple",
        "backend=aten,jit,te,inductor", "backend.executor=profiling,simple,legacy",
        "dtype=float32,bfloat16", "bench.num_threads=1,2",
        "shape=small", "device=cpu", "bench.processes=2", "bench.warmup=3", "bench.iters=30"]
WINDOW = 7  # cells per window, the baseline besides


def _short(values: Any) -> Any:
    """Floats to 5 significant digits, recursively (the file stays small)."""
    if isinstance(values, float):
        return float(f"{values:.5g}")
    if isinstance(values, list):
        return [_short(v) for v in values]
    return values


def cell_record(m, window: int) -> dict:
    """One measured cell, compactly: what the replay needs."""
    from rnnexp.app.search import window as win

    r = m.result
    if r is None:
        return {"overrides": m.overrides, "status": "missing", "reason": "no result recorded",
                "window": window}
    p = win.phase(r)
    return {"overrides": m.overrides, "status": r.status, "reason": r.reason[:300],
            "window": window, "median_ms": _short(p.median_ms),
            "rounds_ms": _short(p.rounds_ms) if p.timed else [],
            "peak_mb": _short(win.peak_mb(r)), "compile_s": _short(win.compile_s(r)),
            "flags": r.flags}


def load(path: Path = DATA) -> dict:
    if not path.is_file():
        return {"grid": GRID, "cells": [], "windows": []}
    return json.loads(gzip.decompress(path.read_bytes()))


def save(data: dict, path: Path = DATA) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(data, separators=(",", ":")).encode()))


def record(path: Path = DATA, folder: Optional[Path] = None) -> None:
    """Every cell of GRID, recorded into `path` window by window (resumable)."""
    from rnnexp.app.search import precheck, space, window

    s = space.parse(GRID)
    data = load(path)
    done = {tuple(c["overrides"]) for c in data["cells"]}
    base = s.overrides(s.baseline)
    todo = []
    for params in s.cells():
        cell = s.overrides(params)
        if tuple(cell) in done:
            continue
        refused = precheck.refusal(s.command_line(params))
        if refused is not None:
            data["cells"].append({"overrides": cell, "status": "unsupported",
                                  "reason": refused.reason[:300], "window": None})
            continue
        todo.append(cell)
    save(data, path)
    random.Random(len(done)).shuffle(todo)
    folder = folder or Path(tempfile.mkdtemp(prefix="rnnexp-grid-"))
    print(f"{len(todo)} cells to measure in windows of {WINDOW}; {folder}", flush=True)
    for start in range(0, len(todo), WINDOW):
        batch = todo[start:start + WINDOW]
        n = len(data["windows"])
        t0 = time.time()
        w = window.measure(batch, base, s.fixed, folder / f"w{n:03d}")
        data["windows"].append({"base": cell_record(w.baseline, n),
                                "wall_s": round(time.time() - t0, 1)})
        data["cells"] += [cell_record(m, n) for m in w.cells]
        save(data, path)
        print(f"window {n}: {len(batch)} cells in {time.time() - t0:.0f} s "
              f"({len(data['cells'])}/{s.size} recorded)", flush=True)


def main(argv: Sequence[str]) -> None:
    if argv and argv[0] == "record":
        record()
    else:
        report(seeds=int(argv[0]) if argv else 20)



def one_search(rec, s, sampler: str, seed: int, budget: int, objectives,
               advice: bool = True) -> dict:
    """One replayed search: what it announced, how far from the grid's best, what it tried."""
    import optuna

    from rnnexp.app.search import confirm, replay, study

    sim = replay.Replay(rec, s)
    # Optuna's samplers as they come; rnnexp search's own loop follows refusals' advice.
    settings = study.Settings(objectives=objectives, budget=budget, sampler=sampler, seed=seed,
                              follow_advice=advice, refine=advice)
    with tempfile.TemporaryDirectory(prefix="rnnexp-replay-") as tmp:
        search = study.Search(s, Path(tmp), settings, measure=sim.measure,
                              refusal=sim.refusal, storage=optuna.storages.InMemoryStorage())
        search.run()
        ranked = study.ranked(search.study)
        picks = [(t.number, dict(t.params)) for t in ranked[:2]]
        won = confirm.confirm(s, picks, Path(tmp), sim.measure).winner
    _, best = rec.best()
    got = rec.speedup(s.key(won.params)) if won else 0.0
    return {"gap": best / got - 1 if got else float("inf"), "tried": search.measured,
            "measured": len(set(sim.measured)), "windows": sim.windows}


# The replayed searches start from a cell far from the best (TorchScript's default executor
# on the plain cell loop, fastrnns' usual setting), not from the recording's baseline, which
# is the grid's best on this CPU: every cell's value stays its recorded speedup against the
# recording's baseline, a constant factor from the speedup against this one.
REPLAY_BASELINE = ["model=jit", "backend=jit", "backend.executor=profiling"]
OURS = ("gp", "tpe")  # rnnexp search's samplers; the others run as Optuna gives them


def report(seeds: int = 20, path: Path = DATA, samplers=("gp", "tpe", "default", "random"),
           objectives=("time", "memory")) -> None:
    """The search replayed over the recording, `seeds` times per sampler."""
    import math
    import statistics

    from rich.console import Console
    from rich.table import Table

    from rnnexp.app.search import replay, space

    console = Console(width=None if sys.stdout.isatty() else 150)
    rec = replay.Recording.load(path)
    s = space.parse(rec.grid, REPLAY_BASELINE)
    budget = math.ceil(s.size / 10)
    key, best = rec.best()
    timed = sum(rec.speedup(k) is not None for k in rec.cells)
    near = sum((v := rec.speedup(k)) is not None and best / v - 1 <= 0.03 for k in rec.cells)
    console.print(f"grid: {s.size} cells ({timed} timed, {s.size - timed} refused or failed); "
                  f"best {' '.join(key)} at {best:.3f}× the baseline; {near} cell(s) within 3% "
                  f"of it; budget {budget} cells (10%), {seeds} seeds; objectives "
                  f"{','.join(objectives)}", highlight=False)
    table = Table(title="replayed searches: the announced winner against the grid's best")
    for col in ("sampler", "within 3%", "median gap", "worst gap", "budget used",
                "cells measured", "windows"):
        table.add_column(col, justify="left" if col == "sampler" else "right")
    for sampler in samplers:
        t0 = time.perf_counter()
        ours = sampler in OURS
        runs = [one_search(rec, s, sampler, seed, budget, objectives, advice=ours)
                for seed in range(seeds)]
        gaps = [r["gap"] for r in runs]
        table.add_row(
            ("rnnexp search, " if ours else "") + {
                "gp": "GPSampler (noisy)", "default": "Optuna's default sampler (TPE)",
                "random": "random search", "tpe": "TPESampler"}.get(sampler, sampler),
            f"{sum(g <= 0.03 for g in gaps)}/{seeds}",
            f"{100 * statistics.median(gaps):.1f}%", f"{100 * max(gaps):.1f}%",
            f"{statistics.mean(r['tried'] for r in runs):.1f}",
            f"{statistics.mean(r['measured'] for r in runs):.1f}",
            f"{statistics.mean(r['windows'] for r in runs):.1f}")
        console.print(f"{sampler}: {time.perf_counter() - t0:.0f} s", highlight=False)
    console.print(table)


if __name__ == "__main__":
    main(sys.argv[1:])
