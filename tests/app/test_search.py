"""`rnnexp search`: its space read from Hydra's sweep syntax (conditional fields from the
configs), its decisions on a replayed grid (refused and failed cells are constraints, never
measured again; a stored study goes on; the winner is the one a fresh A/B confirms), and
one real search end to end."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from rnnexp.app.commands import run_command
from rnnexp.app.search import confirm, replay, space, study, window
from rnnexp.errors import RnnexpError
from rnnexp.results.result import INVALID, OK, UNSUPPORTED
from tests.conftest import ROOT

SPACE = ["model=jit", "backend=aten,jit,te", "backend.executor=profiling,simple",
         "dtype=float32,bfloat16", "bench.num_threads=1,2", "shape=small", "device=cpu"]
# What makes a synthetic cell fast: a factor per value, multiplied.
FACTORS = {"backend=aten": 1.0, "backend.executor=profiling": 1.3,
           "backend.executor=simple": 1.6, "dtype=float32": 1.0, "dtype=bfloat16": 0.5,
           "bench.num_threads=1": 1.0, "bench.num_threads=2": 1.2}


@pytest.fixture(scope="module")
def grid() -> space.Space:
    return space.parse(SPACE)


def rounds(level: float, seed: int) -> list[list[float]]:
    """Two processes × 10 rounds around `level` ms, with a deterministic wobble."""
    return [[level * (1 + 0.01 * ((seed * 7 + p * 3 + r * 5) % 5 - 2)) for r in range(10)]
            for p in range(2)]


def recording(s: space.Space) -> replay.Recording:
    """Every cell of SPACE: te refused (no LLVM), jit profiling in bfloat16 fails
    verification, the rest timed at 1 ms ÷ their factors, each with the baseline in its
    window."""
    cells, bases = [], []
    for i, params in enumerate(s.cells()):
        own = s.overrides(params)
        if "backend=te" in own:
            cells.append({"overrides": own, "status": UNSUPPORTED, "window": None,
                          "reason": "backend=te cannot fuse on the CPU: no LLVM"})
            continue
        if {"backend.executor=profiling", "dtype=bfloat16"} <= set(own):
            cells.append({"overrides": own, "status": INVALID, "window": len(bases),
                          "reason": "verification failed: max error 0.3 > 0.05",
                          "rounds_ms": rounds(0.2, i)})
            bases.append({"rounds_ms": rounds(1.0, 99)})
            continue
        factor = 1.0
        for o in own:
            factor *= FACTORS.get(o, 1.0)
        cells.append({"overrides": own, "status": OK, "window": len(bases),
                      "rounds_ms": rounds(1.0 / factor, i), "median_ms": 1.0 / factor,
                      "peak_mb": 10.0 * factor, "compile_s": 0.1})
        bases.append({"rounds_ms": rounds(1.0, 99)})
    return replay.Recording.of({"grid": SPACE, "cells": cells,
                                "windows": [{"base": b} for b in bases]})


def searched(s: space.Space, folder: Path, budget: int, sampler: str = "gp", seed: int = 0,
             sim: replay.Replay | None = None) -> tuple[study.Search, replay.Replay]:
    sim = sim or replay.Replay(recording(s), s)
    search = study.Search(s, folder, study.Settings(budget=budget, batch=3, sampler=sampler,
                                                    seed=seed),
                          measure=sim.measure, refusal=sim.refusal)
    search.run()
    return search, sim


def test_a_field_of_one_backend_is_searched_only_under_it(grid):
    backend = next(d for d in grid.dimensions if d.name == "backend")
    assert backend.choices == ("backend=aten", "backend=jit backend.executor=profiling",
                               "backend=jit backend.executor=simple", "backend=te")
    threads = next(d for d in grid.dimensions if d.name == "bench.num_threads")
    assert threads.ints == (1, 2, 1)
    assert grid.size == 4 * 2 * 2 == len(list(grid.cells()))
    assert grid.command_line(grid.baseline) == [
        "model=jit", "shape=small", "device=cpu", "backend=aten", "dtype=float32",
        "bench.num_threads=1"]


def test_a_field_no_searched_option_has_is_refused_in_one_line():
    with pytest.raises(RnnexpError) as err:
        space.parse(["model=jit", "backend=aten,jit", "backend.mode=default,max-autotune"])
    assert str(err.value).startswith("backend.mode: is a field of no backend searched here")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("args, says", [
    (["backend=aten,jit", "backend=aten"], "backend: is both fixed and searched"),
    (["dtype=float32,bfloat16", "--baseline", "dtype=float16"],
     "--baseline dtype=float16: not a value of the space"),
    (["dtype=float32,bfloat16", "--baseline", "seed=3"], "--baseline seed: not searched"),
    (["shape.seq_len=interval(2,6)"], "shape.seq_len: "),
    (["dtype=float32,bfloat16", "--budget", "0"], "--budget 0: must be ≥ 1"),
    (["model=jit", "backend=te,aten"], "the baseline backend=te cannot run here"),
])
def test_bad_input_is_one_line_before_anything_runs(args, says, tmp_path, capsys):
    """Through the commands' error boundary in this process (`python -m rnnexp search` is
    `run_command` in a process of its own: the next test)."""
    rc = run_command("search", [*args, "--folder", str(tmp_path / "s"), "--no-mlflow"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert says in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "s").exists()


def test_bad_input_through_python_m_rnnexp_search_exits_2_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rnnexp", "search", "model=jit",
                           "shape=small", "--folder", str(tmp_path / "s"), "--no-mlflow"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "nothing to search" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s").exists()


def test_refused_and_failed_cells_are_constraints_never_measured_again(grid, tmp_path):
    search, sim = searched(grid, tmp_path, budget=grid.size, sampler="tpe")
    assert search.tried == grid.size  # the whole grid, each cell once
    assert search.measured == grid.size - 4  # the four te cells refused by their plan
    assert len(sim.measured) == len(set(sim.measured))  # never measured twice
    assert not [c for c in sim.measured if "backend=te" in c]  # refused before measuring
    trials = search.first_of()
    failed = {k: t for k, t in trials.items() if study.constraints(t)[0] > 0}
    assert {t.user_attrs["status"] for t in failed.values()} == {UNSUPPORTED, INVALID}
    assert all(t.user_attrs["reason"] for t in failed.values())
    # A failed cell is never among the fast ones, however fast its samples were.
    assert all(study.constraints(t)[0] <= 0 for t in study.ranked(search.study))
    best = study.ranked(search.study)[0]
    assert best.user_attrs["cell"] == ("backend=jit backend.executor=simple dtype=float32 "
                                       "bench.num_threads=2")


def test_a_refusal_s_advice_is_the_next_cell_proposed(grid, tmp_path):
    search, _ = searched(grid, tmp_path, budget=1)  # the baseline alone
    refused = {"backend": "backend=te", "model": "model=jit", "dtype": "dtype=bfloat16",
               "bench.num_threads": 2}
    advised = search.advised(refused, "backend=te cannot fuse on the CPU: no LLVM — use "
                                      "backend=jit, backend=inductor or device=cuda")
    assert advised == {**refused, "backend": "backend=jit backend.executor=profiling"}
    assert search.advised(refused, "no advice here") is None


def test_repeated_proposals_are_answered_from_the_first_measurement(grid, tmp_path):
    search, sim = searched(grid, tmp_path, budget=12, sampler="tpe", seed=3)
    repeats = [t for t in search.study.trials if "repeat_of" in t.user_attrs]
    for t in repeats:
        first = search.study.trials[t.user_attrs["repeat_of"]]
        assert grid.key(t.params) == grid.key(first.params) and t.values == first.values
    assert len(sim.measured) == len(set(sim.measured))


def test_a_stored_study_goes_on_where_it_stopped(grid, tmp_path):
    """What is stored, not how the next cell is chosen: TPE (the Gaussian process fits a
    model for each proposal, seconds each)."""
    sim = replay.Replay(recording(grid), grid)
    first, _ = searched(grid, tmp_path, budget=5, sampler="tpe", sim=sim)
    assert (tmp_path / study.DB).is_file() and first.measured == 5
    before, asked = list(sim.measured), len(first.study.trials)
    again, _ = searched(grid, tmp_path, budget=9, sampler="tpe", sim=sim)
    assert again.measured == 9
    assert len(sim.measured) == len(set(sim.measured))  # nothing of the first measured again
    assert sim.measured[:len(before)] == before
    assert len(again.study.trials) > asked  # the same study, with more trials
    with sqlite3.connect(tmp_path / study.DB) as db:
        assert db.execute("select count(*) from studies").fetchone()[0] == 1


def test_an_unfinished_window_is_asked_again_on_resume(grid, tmp_path):
    sim = replay.Replay(recording(grid), grid)

    def stops(*args):
        raise KeyboardInterrupt

    search = study.Search(grid, tmp_path, study.Settings(budget=4, batch=3),
                          measure=stops, refusal=sim.refusal)
    with pytest.raises(KeyboardInterrupt):
        search.run()
    running = search.study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert running  # asked, never told
    again, _ = searched(grid, tmp_path, budget=4, sim=sim)
    assert not again.study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert again.measured == 4


def test_a_study_of_another_space_is_not_continued(grid, tmp_path):
    searched(grid, tmp_path, budget=3)
    other = space.parse([*SPACE[:-1], "device=cpu", "seed=1"])
    with pytest.raises(RnnexpError, match="holds a search of another space"):
        study.Search(other, tmp_path, study.Settings(budget=3))


def test_the_winner_is_the_one_a_fresh_ab_confirms(grid, tmp_path):
    """The search ranks A over B; in the fresh window B is faster: B is announced, and the
    window held exactly the two and the baseline."""
    search, sim = searched(grid, tmp_path, budget=grid.size, sampler="tpe")
    a, b = study.ranked(search.study)[:2]
    asked = []

    def fresh(cells, baseline, fixed, folder):
        asked.append((cells, baseline, folder))
        w = sim.measure(cells, baseline, fixed, folder)
        first, second = w.cells
        first.difference, second.difference = second.difference, first.difference
        return w

    c = confirm.confirm(grid, [(a.number, dict(a.params)), (b.number, dict(b.params))],
                        tmp_path, fresh)
    assert asked == [([grid.overrides(a.params), grid.overrides(b.params)],
                      grid.overrides(grid.baseline), tmp_path / confirm.FOLDER)]
    assert c.winner is not None and c.winner.trial == b.number


@pytest.mark.slow
def test_replayed_searches_beat_random_on_the_synthetic_grid(grid, tmp_path):
    """The decision rule, not a timing: on a grid with a clear best the GP search finds it
    within its budget for most seeds."""
    found = 0
    for seed in range(5):
        search, _ = searched(grid, tmp_path / str(seed), budget=8, seed=seed)
        found += study.ranked(search.study)[0].user_attrs["cell"] == (
            "backend=jit backend.executor=simple dtype=float32 bench.num_threads=2")
    assert found >= 3


def test_the_adapter_writes_one_trial_option_per_cell():
    text = window.trial_option(["backend=inductor", "backend.mode=max-autotune",
                                "bench.num_threads=2", "dtype=bfloat16"])
    assert text.startswith("# @package _global_\ndefaults:\n  - override /backend: inductor\n")
    assert "mode: max-autotune" in text and "num_threads: 2" in text
    assert "dtype: bfloat16" in text


@pytest.mark.slow
def test_a_real_search_end_to_end(tmp_path):
    """Two windows of a real sweep and a confirmation, recorded in MLflow and study.db."""
    store = f"sqlite:///{tmp_path}/mlflow.db"
    proc = subprocess.run(
        [sys.executable, "-m", "rnnexp", "search", "model=jit", "shape=small", "device=cpu",
         "backend=aten,jit,te", "backend.executor=profiling,simple", "bench.processes=1",
         "bench.warmup=2", "bench.iters=12", "--budget", "4", "--batch", "2", "--seed", "0",
         "--folder", str(tmp_path / "s"),
         "--tracking-uri", store],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fastest: " in proc.stdout and "confirmed in a fresh window" in proc.stdout
    summary = json.loads((tmp_path / "s" / "search.json").read_text())
    assert summary["announced"]["confirmed"] is True and summary["tried"] == 4
    assert (tmp_path / "s" / study.DB).is_file()
    assert (tmp_path / "s" / confirm.FOLDER / "sweep").is_dir()
    import mlflow

    client = mlflow.MlflowClient(store)
    exp = client.get_experiment_by_name("rnnexp")
    parent = client.search_runs([exp.experiment_id], "tags.`rnnexp.kind` = 'search'")[0]
    children = client.search_runs([exp.experiment_id],
                                  f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    roles = sorted(r.data.tags.get("search.role") for r in children)
    assert roles.count("trial") == 4 and "confirm winner" in roles
    refused = [r for r in children if "search.constraint" in r.data.tags]
    assert refused and "backend=te" in refused[0].data.tags["search.cell"]


def test_compile_cost_is_a_third_objective_on_request(grid, tmp_path):
    sim = replay.Replay(recording(grid), grid)
    search = study.Search(grid, tmp_path, study.Settings(objectives=("time", "memory",
                                                                     "compile"), budget=4),
                          measure=sim.measure, refusal=sim.refusal)
    search.run()
    assert [d.name for d in search.study.directions] == ["MAXIMIZE", "MINIMIZE", "MINIMIZE"]
    ok = study.feasible(search.study)
    assert ok and all(len(t.values) == 3 and t.user_attrs["compile_s"] == 0.1 for t in ok)


# A conditional space: nn.LSTM runs under ATen alone (elsewhere refused, with advice), and is
# fastest there — a cell whose marginals look poor (model=lstm is refused in 3 of 4 backends,
# ATen is the slowest backend for the cell loop).
CONDITIONAL = ["model=jit,lstm", "backend=jit,aten", "backend.executor=profiling,simple",
               "dtype=float32,bfloat16", "bench.num_threads=1,2", "shape=small",
               "device=cpu"]
LSTM_REFUSED = ("backend=jit scripts cell-loop models; model=lstm is an nn module that "
                "TorchScript would not change — use backend=aten or its cell loop model=jit")


@pytest.fixture(scope="module")
def conditional() -> space.Space:
    return space.parse(CONDITIONAL)


def conditional_recording(s: space.Space) -> replay.Recording:
    level = {"model=jit": 1.0, "model=lstm": 0.4, "backend=aten": 2.0,
             "backend.executor=profiling": 1.2, "dtype=bfloat16": 3.0,
             "bench.num_threads=2": 20.0}
    cells, bases = [], []
    for i, params in enumerate(s.cells()):
        own = s.overrides(params)
        if "model=lstm" in own and "backend=jit" in own:
            cells.append({"overrides": own, "status": UNSUPPORTED, "window": None,
                          "reason": LSTM_REFUSED})
            continue
        ms = 1.0
        for o in own:
            ms *= level.get(o, 1.0)
        if "model=lstm" in own:  # ATen runs nn.LSTM fused, not the cell loop
            ms /= level["backend=aten"]
        cells.append({"overrides": own, "status": OK, "window": len(bases),
                      "rounds_ms": rounds(ms, i), "median_ms": ms, "peak_mb": 1.0})
        bases.append({"rounds_ms": rounds(1.0, 99)})
    return replay.Recording.of({"grid": CONDITIONAL, "cells": cells,
                                "windows": [{"base": b} for b in bases]})


def conditional_search(s, folder, **settings):
    sim = replay.Replay(conditional_recording(s), s)
    search = study.Search(s, folder, study.Settings(**{"budget": 6, "batch": 3,
                                                       "sampler": "tpe", "seed": 0,
                                                       **settings}),
                          measure=sim.measure, refusal=sim.refusal)
    return search, sim


def test_neighbours_take_a_refused_option_where_its_advice_says_it_runs(conditional,
                                                                        tmp_path):
    search, _ = conditional_search(conditional, tmp_path)
    base = conditional.baseline
    near = search.neighbours(base, room=10)
    labels = [conditional.label(c) for c in near]
    # model=lstm under the baseline's backend is refused: it comes first, under ATen.
    assert labels[0] == "model=lstm backend=aten dtype=float32 bench.num_threads=1"
    # Then one new value of each key in turn, keys with fewer values first; every one of
    # them one key from the baseline, none refused, none twice.
    rest = near[1:]
    assert [sum(c[k] != base[k] for k in base) for c in rest] == [1] * len(rest)
    assert len({conditional.key(c) for c in near}) == len(near)
    assert all(search.refusal(conditional.command_line(c)) is None for c in near)
    assert len(rest) == 1 + 1 + 2  # dtype, threads, then backend's two others
    assert search.neighbours(base, room=2) == near[:2]


def test_the_first_window_screens_the_baseline_s_neighbours(conditional, tmp_path):
    search, sim = conditional_search(conditional, tmp_path)
    expect = [conditional.key(c) for c in search.neighbours(conditional.baseline, 3)]
    search.run()
    first = sim.measured[:3]  # the first window (batch 3), the baseline besides
    assert first == expect
    assert ("model=lstm", "backend=aten", "dtype=float32", "bench.num_threads=1") in first
    assert study.ranked(search.study)[0].user_attrs["cell"] == (
        "model=lstm backend=aten dtype=float32 bench.num_threads=1")
    assert search.measured == 6


def test_without_the_screen_the_first_window_is_the_sampler_s(conditional, tmp_path):
    search, sim = conditional_search(conditional, tmp_path, screen=False, refine=False,
                                     follow_advice=False, sampler="random")
    search.run()
    screened = [conditional.key(c) for c in
                conditional_search(conditional, tmp_path / "other")[0].neighbours(
                    conditional.baseline, 3)]
    assert sim.measured[:3] != screened


def test_the_last_window_refines_around_the_best(conditional, tmp_path):
    search, sim = conditional_search(conditional, tmp_path, budget=9)
    search.run()
    last = [t for t in search.study.trials if "neighbour_of" in t.user_attrs]
    assert last and all(t.user_attrs["neighbour_of"] == study.ranked(search.study)[0].number
                        or "repeat_of" in t.user_attrs for t in last)
    assert len(sim.measured) == len(set(sim.measured)) == 8  # the baseline besides


def test_neighbours_bring_values_never_measured_first_and_poor_ones_last(grid, tmp_path):
    """After the screen (bfloat16, two threads and the profiling executor measured, each
    from the baseline), the profiling cell's neighbours: the simple executor, never
    measured, first; two threads, seen faster, next; bfloat16, seen slower, last."""
    search, _ = searched(grid, tmp_path, budget=4, sampler="tpe")
    center = next(dict(t.params) for t in search.first_of().values()
                  if t.user_attrs["cell"].startswith("backend=jit backend.executor=profiling"))
    assert [grid.label(c) for c in search.neighbours(center, grid.size)] == [
        "backend=jit backend.executor=simple dtype=float32 bench.num_threads=1",
        "backend=jit backend.executor=profiling dtype=float32 bench.num_threads=2",
        "backend=jit backend.executor=profiling dtype=bfloat16 bench.num_threads=1"]


def test_the_confirmation_announces_the_faster_not_the_less_noisy(grid, tmp_path):
    """In the fresh window the runner-up is faster but noisier: it is announced, and the
    head-to-head is turned to read winner against runner-up."""
    search, sim = searched(grid, tmp_path, budget=grid.size, sampler="tpe")
    from rnnexp.analysis.significance import Difference
    from rnnexp.app.search import flow

    def fresh(cells, baseline, fixed, folder):
        w = sim.measure(cells, baseline, fixed, folder)
        w.cells[0].difference = Difference(1.5, 1.4, 1.6, 0.001, real=True)
        w.cells[1].difference = Difference(1.7, 1.2, 2.4, 0.01, real=True)
        return w

    search.measure = fresh
    out = flow.conclude(search)
    first, second = out.confirmation.candidates
    assert out.winner is second and out.runner_up is first
    assert out.announced == {"cell": grid.label(second.params), "trial": second.trial,
                             "speedup": 1.7, "low": 1.2, "high": 2.4, "confirmed": True}
    summary = json.loads((tmp_path / flow.SUMMARY).read_text())
    assert summary["announced"]["trial"] == second.trial and summary["tried"] == grid.size
    h = out.confirmation.head_to_head
    if h is not None:
        assert out.versus.speedup == pytest.approx(1 / h.speedup)


def test_redrawn_noise_makes_every_measurement_fresh(grid):
    import random

    rec = recording(grid)
    key = grid.key({**grid.baseline, "dtype": "dtype=bfloat16"})
    noisy = replay.Replay(rec, grid, noise=random.Random(1))
    draws = [noisy._measured(list(key)).difference.speedup for _ in range(5)]
    assert len(set(draws)) == 5  # each measurement draws again
    assert all(0.5 * rec.speedup(key) < d < 2 * rec.speedup(key) for d in draws)
    again = replay.Replay(rec, grid, noise=random.Random(1))
    assert again._measured(list(key)).difference.speedup == draws[0]  # seeded
    plain = replay.Replay(rec, grid)
    assert plain._measured(list(key)).difference.speedup == rec.speedup(key)
