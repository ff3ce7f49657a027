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

import dataclasses
import gzip
import json
import random
import re
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
    """`record`, or `[SEEDS] [VARIANT ...] [--samplers gp,tpe,default,random]`: the replay
    (every variant and sampler unless named)."""
    if argv and argv[0] == "record":
        record()
        return
    args = list(argv)
    samplers = ("gp", "tpe", "default", "random")
    if "--samplers" in args:
        at = args.index("--samplers")
        samplers = tuple(args[at + 1].split(","))
        del args[at:at + 2]
    report(seeds=int(args[0]) if args else 20, samplers=samplers,
           variants=args[1:] or tuple(VARIANTS))


def one_search(rec, s, sampler: str, seed: int, budget: int, objectives,
               ours: bool = True, noise: bool = False) -> dict:
    """One replayed search: what it announced, how far from the grid's best, what it tried."""
    import optuna

    from rnnexp.app.search import confirm, replay, study

    sim = replay.Replay(rec, s, noise=random.Random(10_000 + seed) if noise else None)
    # Optuna's samplers as they come; rnnexp search's own loop screens the baseline's
    # neighbours, follows refusals' advice and refines around the best.
    settings = study.Settings(objectives=objectives, budget=budget, sampler=sampler, seed=seed,
                              follow_advice=ours, screen=ours, refine=ours)
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
NAMES = {"gp": "rnnexp search (GPSampler, noisy)", "tpe": "rnnexp search --sampler tpe",
         "default": "Optuna's default sampler", "random": "random search"}


# Variants of the recording, to see that what the search does is not fitted to one grid.
# Each takes the recording's data and a seed and gives (data, the replay's baseline cell or
# None for REPLAY_BASELINE).
def _timed(data: dict) -> list[dict]:
    return [c for c in data["cells"] if c["status"] == "ok" and c.get("rounds_ms")]


def _far_start(data: dict, seed: int) -> list[str]:
    """A timed cell more than 3% slower than the grid's best, drawn by the seed."""
    from rnnexp.app.search import replay

    rec = replay.Recording.of(data)
    _, best = rec.best()
    far = [c["overrides"] for c in _timed(data)
           if best / rec.speedup(tuple(c["overrides"])) - 1 > 0.03]
    return random.Random(seed).choice(sorted(far))


def as_recorded(data: dict, seed: int) -> tuple[dict, Optional[list[str]]]:
    return data, None


def random_start(data: dict, seed: int) -> tuple[dict, Optional[list[str]]]:
    """The recording as it is, the search starting from a random cell of it."""
    return data, _far_start(data, seed)


def relabelled(data: dict, seed: int) -> tuple[dict, Optional[list[str]]]:
    """Every key's values permuted (models, backends, dtypes, thread counts), refusals and
    their advice renamed with them, and a random start: the same structure with the best
    under other names, in another order."""
    from rnnexp.app.search import space

    s = space.parse(data["grid"], REPLAY_BASELINE)
    rng = random.Random(seed)
    to: dict[str, str] = {}  # a value's overrides text → its new one
    token: dict[str, str] = {}  # a `key=value` of a reason → its new one
    for d in s.dimensions:
        texts = [" ".join(d.overrides(v)) for v in d.values()]
        # Values that share their first override (`backend=jit` with each executor) are
        # permuted among themselves, so that advice naming `backend=jit` still names them.
        heads = [x.split()[0] for x in texts]
        kinds = [h if heads.count(h) > 1 else "" for h in heads]
        for kind in dict.fromkeys(kinds):
            mine = [x for x, k in zip(texts, kinds, strict=True) if k == kind]
            new = rng.sample(mine, len(mine))
            to.update(zip(mine, new, strict=True))
            for a, b in zip(mine, new, strict=True):
                token.setdefault(a.split()[0], b.split()[0])

    params = {tuple(s.overrides(p)): p for p in s.cells()}

    def cell(c: dict) -> dict:
        p = params[tuple(c["overrides"])]
        out = [o for d in s.dimensions
               for o in to[" ".join(d.overrides(p[d.name]))].split()]
        reason = re.sub(r"[\w.]+=[\w.-]+", lambda m: token.get(m.group(0), m.group(0)),
                        c.get("reason", ""))
        return {**c, "overrides": out, "reason": reason}

    moved = {**data, "cells": [cell(c) for c in data["cells"]]}
    return moved, _far_start(moved, seed)


def best_moved(data: dict, seed: int) -> tuple[dict, Optional[list[str]]]:
    """The best model/backend pair's cells (every dtype and thread count) swapped with those
    of another pair the seed draws, one where every model runs: the best is then reached
    without a refusal, by an interaction of two keys."""
    best = max(_timed(data), key=lambda c: _speed(data, c))["overrides"]
    pair = tuple(best[:-2])  # a cell's overrides: model, backend (and its field), dtype, threads
    groups: dict[tuple[str, ...], list[dict]] = {}
    for c in data["cells"]:
        groups.setdefault(tuple(c["overrides"][:-2]), []).append(c)
    others = sorted(k for k, cs in groups.items() if k not in (pair, tuple(REPLAY_BASELINE))
                    and all(c["status"] == "ok" for c in cs))
    target = others[seed % len(others)]
    swap = {pair: target, target: pair}
    cells = []
    for c in data["cells"]:
        head = tuple(c["overrides"][:-2])
        if head in swap:
            tail = c["overrides"][-2:]
            twin = next(x for x in groups[swap[head]] if x["overrides"][-2:] == tail)
            c = {**twin, "overrides": list(head) + tail}
        cells.append(c)
    return {**data, "cells": cells}, None


def _speed(data: dict, c: dict) -> float:
    from rnnexp.analysis import significance

    return significance.paired(data["windows"][c["window"]]["base"]["rounds_ms"],
                               c["rounds_ms"]).speedup


VARIANTS = {
    "recorded": (as_recorded, False, "the recording, replayed as recorded"),
    "noise": (as_recorded, True, "noise drawn again for every measurement"),
    "start": (random_start, True, "a random start, noise drawn again"),
    "relabelled": (relabelled, True, "every key's values permuted, a random start, noise"),
    "moved": (best_moved, True, "the best model/backend pair swapped with another, noise"),
}


def report(seeds: int = 20, path: Path = DATA, samplers=("gp", "tpe", "default", "random"),
           objectives=("time", "memory"), variants: Sequence[str] = tuple(VARIANTS)) -> None:
    """The search replayed over the recording and its variants, `seeds` times per
    sampler."""
    import math
    import statistics

    from rich.console import Console
    from rich.table import Table

    from rnnexp.app.search import replay, space

    console = Console(width=None if sys.stdout.isatty() else 150)
    data = load(path)
    rec = replay.Recording.of(data)
    s = space.parse(rec.grid, REPLAY_BASELINE)
    budget = math.ceil(s.size / 10)
    key, best = rec.best()
    timed = sum(rec.speedup(k) is not None for k in rec.cells)
    near = sum((v := rec.speedup(k)) is not None and best / v - 1 <= 0.03 for k in rec.cells)
    console.print(f"grid: {s.size} cells ({timed} timed, {s.size - timed} refused or failed); "
                  f"best {' '.join(key)} at {best:.3f}× the baseline; {near} cell(s) within 3% "
                  f"of it; budget {budget} measured cells (10%), {seeds} seeds; objectives "
                  f"{','.join(objectives)}", highlight=False)
    table = Table(title="replayed searches: the announced winner against the grid's best "
                        "(within 3% / median gap / worst gap)")
    table.add_column("variant")
    for sampler in samplers:
        table.add_column(NAMES[sampler], justify="right")
    used: dict[str, list[dict]] = {}
    for name in variants:
        make, noise, _ = VARIANTS[name]
        row = [name]
        cases = []
        for seed in range(seeds):
            d, start = make(data, seed)
            r = replay.Recording.of(d)
            cases.append((r, dataclasses.replace(s, baseline=s.baseline if start is None
                                                 else _params(s, start))))
        for sampler in samplers:
            t0 = time.perf_counter()
            runs = [one_search(r, sp, sampler, seed, budget, objectives,
                               ours=sampler in OURS, noise=noise)
                    for seed, (r, sp) in enumerate(cases)]
            used.setdefault(sampler, []).extend(runs)
            gaps = [x["gap"] for x in runs]
            row.append(f"{sum(g <= 0.03 for g in gaps)}/{seeds} · "
                       f"{100 * statistics.median(gaps):.1f}% · {100 * max(gaps):.0f}%")
            console.print(f"{name}, {sampler}: {row[-1]} "
                          f"({time.perf_counter() - t0:.0f} s)", highlight=False)
        table.add_row(*row)
    console.print(table)
    for sampler, runs in used.items():
        tried = [x["tried"] for x in runs]
        console.print(f"{NAMES[sampler]}: budget used {statistics.mean(tried):.1f} (max "
                      f"{max(tried)}), distinct cells measured "
                      f"{statistics.mean(x['measured'] for x in runs):.1f}, windows "
                      f"{statistics.mean(x['windows'] for x in runs):.1f}", highlight=False)


def _params(s, overrides: Sequence[str]) -> dict:
    """The cell of space `s` whose own overrides these are."""
    return next(p for p in s.cells() if s.overrides(p) == list(overrides))


if __name__ == "__main__":
    main(sys.argv[1:])
