"""Comparisons at the unit of replication: jobs of one interleaved window pair up by round,
runs measured apart are judged run against run; identical work (A/A) is not called different
more often than α, a planted slowdown is found, and the CLI says what differs and shows both
sides. Synthetic measurements model what this machine does: a level shared by everything
measured in a round (or a run) that moves by tens of percent, process offsets, sample noise."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from rnnexp.analysis import compare, compare_render, significance
from rnnexp.analysis.significance import Level
from rnnexp.app.commands import run_command
from rnnexp.machine.environment import BUSY, Environment
from rnnexp.measure.records import Samples
from rnnexp.results import exit_codes
from rnnexp.results.result import OK, Interleaving, Result, phase_stats
from rnnexp.results.sinks import load_jobs
from tests.conftest import TINY

SWEEP = ["model=lstm,jit", "backend=aten", "device=cpu", *TINY]
CAPTION = "baseline and ms:"  # the compared table's caption begins so
ROUNDS, PROCESSES, PER_ROUND = 12, 3, 5
ROUND_SHIFT = 0.25  # σ of the log level a worker's visits of one round share
PROCESS_SPREAD = 0.10  # σ of a process's log offset, common to what it hosts
OWN_SPREAD = 0.01  # σ of one configuration's own log offset in a process
NOISE = 0.05  # σ of a sample's log noise


def interleaved_rounds(rng, shifts, factor: float, common, bursts: float = 0.0,
                       own: float = OWN_SPREAD) -> list[Samples]:
    """One configuration in the window's worker processes: each process p's round r shares
    its level `shifts[p][r]` and offset `common[p]` with every configuration the process
    hosts, plus an offset of its own (σ `own`); with `bursts`, that share of its visits is
    2–15× slower (another process took the cores: this visit's alone)."""
    out = []
    for p, offset in enumerate(common):
        mine = rng.normal(0, own)
        s = Samples()
        for r, shift in enumerate(shifts[p]):
            burst = rng.uniform(2, 15) if rng.random() < bursts else 1.0
            values = burst * factor * np.exp(shift + offset + mine
                                             + rng.normal(0, NOISE, PER_ROUND))
            s.extend(Samples(values.tolist(), (2 * values).tolist()).in_round(r))
        out.append(s)
    return out


def rounds_of(per_process: list[Samples], phase: str = "forward") -> list[list[float]]:
    stats = phase_stats(pooled(per_process), work(), per_process=per_process)
    return stats[phase].rounds_ms


def pooled(per_process: list[Samples]) -> Samples:
    out = Samples()
    for s in per_process:
        out.extend(s)
    return out


def work():
    from rnnexp.models.work import Work

    return Work(tokens=1, flops_fwd=1.0, flops_bwd=1.0, bytes_fwd=1.0, bytes_bwd=1.0)


# Synthetic statistics -----------------------------------------------------------------


def window(rng, factors: tuple[float, ...], rounds: int = ROUNDS, bursts: float = 0.0,
           processes: int = PROCESSES, shared: bool = True, own: float = OWN_SPREAD
           ) -> list[significance.Side]:
    """The sides of configurations measured in one interleaved window, each `factor` times
    the work of the first: in `processes` worker processes they share (a block), or each in
    processes of its own."""
    def draws():
        return rng.normal(0, ROUND_SHIFT, (processes, rounds)), \
            rng.normal(0, PROCESS_SPREAD, processes)

    shifts, common = draws()
    out = []
    for n, f in enumerate(factors):
        if not shared:
            shifts, common = draws()
        workers = list(range(processes)) if shared else \
            list(range(n * processes, (n + 1) * processes))
        out.append(significance.Side(rounds_of(interleaved_rounds(
            rng, shifts, f, common, bursts, own)), workers=workers))
    return out


def judged(base: significance.Side, other: significance.Side, min_effect: float = 0.03):
    (d,) = significance.decide([significance.paired(base, other)], min_effect=min_effect)
    return d


def within_alpha(flagged: int, trials: int) -> bool:
    return flagged <= trials * significance.ALPHA + 3 * math.sqrt(trials * 0.05 * 0.95)


@pytest.mark.parametrize("shared", [True, False])
def test_interleaved_a_a_false_alarms_stay_within_alpha(shared):
    """300 windows of two identical configurations under round-to-round shifts of ±25% and
    process offsets of ±10% (a block's shared processes, or processes of their own): at
    most α of them are called different."""
    rng = np.random.default_rng(11)
    trials = 300
    flagged = sum(judged(*window(rng, (1.0, 1.0), shared=shared), min_effect=0.0).real
                  for _ in range(trials))
    assert within_alpha(flagged, trials)


def test_a_process_offset_of_its_own_is_not_a_difference():
    """Identical configurations, each with its own persistent offset in each process (σ 5%,
    what a GPU process's placement or specialisation does): paired by round alone, one
    process a side would call that a difference; with the process as the replicate at most α
    of the windows are called different, and one process a side says it cannot tell."""
    rng = np.random.default_rng(21)
    trials = 300
    flagged = sum(judged(*window(rng, (1.0, 1.0), own=0.05), min_effect=0.0).real
                  for _ in range(trials))
    assert within_alpha(flagged, trials)
    one = [judged(*window(rng, (1.0, 1.0), processes=1, own=0.05)) for _ in range(20)]
    assert all(d.verdict == significance.UNDECIDED and "one process" in d.why_not
               and d.cell() == "cannot tell" for d in one)


def test_one_process_a_side_judged_with_a_known_spread_between_processes():
    """With the spread between processes known from elsewhere (the drift history), one
    process a side gives an interval that holds it."""
    rng = np.random.default_rng(22)
    found, flagged, trials = 0, 0, 100
    for _ in range(trials):
        base, same, slow = window(rng, (1.0, 1.0, 1.5), processes=1, own=0.05)
        for side in (base, same, slow):
            side.spread, side.spread_runs = 0.05, 20
        a, b = significance.decide([significance.paired(base, same),
                                    significance.paired(base, slow)], min_effect=0.03)
        flagged += a.real
        found += b.verdict == "slower"
    assert within_alpha(flagged, trials) and found >= 0.8 * trials


@pytest.mark.parametrize("factor, processes", [(1.1, PROCESSES), (1.05, 5)])
def test_interleaved_pairing_finds_a_planted_slowdown(factor, processes):
    """A 10% and a 5% slowdown under the same shifts and offsets in shared processes: found
    in ≥ 80% of windows, and the interval covers the true ratio in ≥ 90%."""
    rng = np.random.default_rng(12)
    found = covered = 0
    trials = 200
    for _ in range(trials):
        d = judged(*window(rng, (1.0, factor), processes=processes))
        found += d.verdict == "slower"
        covered += d.low <= 1 / factor <= d.high
    assert found >= 0.8 * trials and covered >= 0.9 * trials


def test_bursts_that_hit_one_side_neither_fake_nor_hide_a_difference():
    """One visit in ten 2–15× slower, on one side only (a shared machine's bursts): A/A stays
    within α, and a planted 10% slowdown over 20 rounds is still found in ≥ 80%."""
    rng = np.random.default_rng(13)
    trials, flagged, found = 150, 0, 0
    for _ in range(trials):
        base, same, slow = window(rng, (1.0, 1.0, 1.1), rounds=20, bursts=0.1)
        a, b = significance.decide([significance.paired(base, same),
                                    significance.paired(base, slow)], min_effect=0.03)
        flagged += a.real
        found += b.verdict == "slower"
    assert within_alpha(flagged, trials)
    assert found >= 0.8 * trials


def test_the_levels_shown_are_what_the_speedup_compares():
    """The two levels a paired comparison keeps are the ratio it reports, however far the
    pooled medians of bursty samples are from them."""
    rng = np.random.default_rng(14)
    base, slow = window(rng, (1.0, 1.2), bursts=0.2)
    d = judged(base, slow)
    assert d.baseline_ms / d.candidate_ms == pytest.approx(d.speedup)
    assert d.low <= d.speedup <= d.high and d.processes == (PROCESSES, PROCESSES) and d.shared


def test_iterations_of_two_runs_are_not_replicates():
    """Two runs of identical work whose levels differ by 20% (the machine moved between
    them): thousands of iterations each, yet run against run with the known drift it is not
    a difference — and without a drift history nothing can be said."""
    rng = np.random.default_rng(3)
    a = Level(process_medians_ms=[1.0 * math.exp(rng.normal(0, 0.01)) for _ in range(3)],
              drift=0.15, drift_runs=30)
    b = Level(process_medians_ms=[1.2 * math.exp(rng.normal(0, 0.01)) for _ in range(3)],
              drift=0.15, drift_runs=30)
    (d,) = significance.decide([significance.between_runs(a, b)], min_effect=0.03)
    assert not d.real and d.verdict == significance.UNDECIDED
    assert d.cell().startswith("cannot tell ±") and d.low < 1 < d.high
    unknown = Level(process_medians_ms=b.process_medians_ms)
    (d,) = significance.decide([significance.between_runs(a, unknown)])
    assert d.cell() == "cannot tell" and "no drift history" in d.why_not


def test_between_runs_a_a_false_alarms_stay_within_alpha():
    """Runs at different times draw their level from the drift (σ 15%): judged with it,
    identical work is called different in at most α of 300 pairs."""
    rng = np.random.default_rng(5)
    trials, flagged = 300, 0
    for _ in range(trials):
        levels = []
        for _ in range(2):
            run_level = rng.normal(0, 0.15)
            medians = np.exp(run_level + rng.normal(0, 0.02, 3)).tolist()
            levels.append(Level(process_medians_ms=medians, drift=0.15, drift_runs=30))
        (d,) = significance.decide([significance.between_runs(*levels)], min_effect=0.0)
        flagged += d.real
    assert flagged <= trials * significance.ALPHA + 3 * math.sqrt(trials * 0.05 * 0.95)


def test_a_large_difference_between_runs_is_found():
    a = Level(process_medians_ms=[1.0, 1.01, 0.99], drift=0.05, drift_runs=20)
    b = Level(process_medians_ms=[2.0, 2.02, 1.98], drift=0.05, drift_runs=20)
    (d,) = significance.decide([significance.between_runs(a, b)])
    assert d.verdict == "slower" and d.low < 0.5 < d.high and d.method == significance.RUNS


def test_too_few_rounds_say_nothing():
    d = significance.paired([[1.0, 1.1]], [[2.0, 2.2]])
    assert math.isnan(d.low) and d.p == 1.0 and "2 paired rounds" in d.why_not
    (d,) = significance.decide([d])
    assert d.verdict == significance.UNDECIDED and d.cell() == "cannot tell"


def test_a_difference_below_min_effect_with_a_narrow_interval_is_the_same():
    rng = np.random.default_rng(0)
    base, near = window(rng, (1.0, 1.05), rounds=40, processes=5)
    (d,) = significance.decide([significance.paired(base, near)], min_effect=0.10)
    assert not d.real and d.cell() == significance.SAME
    (d,) = significance.decide([significance.paired(base, near)], min_effect=0.03)
    assert d.verdict == "slower" and d.low < 1 / 1.05 < d.high


def test_holm_adjusts_in_step_down_order():
    assert significance.holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert significance.holm([]) == []


# Through the CLI, on a real sweep's results -------------------------------------------


@pytest.fixture(scope="module")
def real_sweep(tmp_path_factory):
    """One real two-job sweep folder (shared; tests copy it before changing anything)."""
    from tests.conftest import rnnexp_here

    tmp = tmp_path_factory.mktemp("sweep")
    proc = rnnexp_here("-m", *SWEEP, "sinks=[json]", f"hydra.sweep.dir={tmp}/sweep",
                       store=f"sqlite:///{tmp}/mlflow.db")
    assert proc.returncode == 0, proc.stderr
    return tmp / "sweep"


def with_rounds(src: Path, dst: Path, seed: int, slower: dict[str, float],
                flags: tuple[str, ...] = ()) -> Path:
    """A copy of a real sweep folder whose measurements are replaced by synthetic
    interleaved ones (one window, shared round shifts); `slower[model]` multiplies a model's
    times; the machine record says what `flags` say."""
    shutil.copytree(src, dst)
    rng = np.random.default_rng(seed)
    shifts = rng.normal(0, ROUND_SHIFT, (PROCESSES, ROUNDS))
    common = rng.normal(0, PROCESS_SPREAD, PROCESSES)
    for folder, result in load_jobs(dst):
        per_process = interleaved_rounds(rng, shifts, slower.get(result.choices["model"], 1),
                                         common)
        result.phases = phase_stats(pooled(per_process), result.work, per_process=per_process)
        result.interleaving = Interleaving(window=f"{dst.name}/0", jobs=[0, 1], rounds=ROUNDS,
                                           workers=list(range(PROCESSES)))
        result.environment = Environment(flags=list(flags), warnings=list(flags))
        result.save(folder)
    return dst


def run_compare(capsys, *args: str) -> tuple[int, str, str]:
    rc = run_command("compare", list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_real_sweep_was_measured_interleaved(real_sweep):
    jobs = load_jobs(real_sweep)
    assert len(jobs) == 2
    windows = {r.interleaving.window for _, r in jobs}
    assert len(windows) == 1 and all(r.timing.interleaved for _, r in jobs)
    for _, r in jobs:
        rounds = r.phases["forward"].rounds_ms
        assert r.interleaving.jobs == [0, 1] and rounds and all(v is not None
                                                               for v in rounds[0])


def test_a_planted_slowdown_in_an_interleaved_sweep_trips_the_gate(real_sweep, tmp_path,
                                                                    capsys):
    sweep = with_rounds(real_sweep, tmp_path / "s", seed=1, slower={"jit": 1.25})
    rc, out, err = run_compare(capsys, str(sweep), "--baseline", "model=lstm",
                               "--fail-on-regression", "10", "--output",
                               str(tmp_path / "c.png"))
    assert rc == exit_codes.REGRESSION, err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all("regression: jit·aten·small·cpu" in ln and
                                   "paired by round" in ln for ln in lines)
    found = [float(m[1]) for ln in lines for m in [re.search(r"([\d.]+)% slower", ln)]]
    assert all(15 < pct < 35 for pct in found)
    assert "fwd baseline" in out and "(this run)" in out and "cells judged: 2 paired by round" \
        in out


def test_an_interleaved_a_a_does_not_trip(real_sweep, tmp_path, capsys):
    sweep = with_rounds(real_sweep, tmp_path / "s", seed=2, slower={}, flags=(BUSY,))
    rc, out, err = run_compare(capsys, str(sweep), "--baseline", "model=lstm",
                               "--fail-on-regression", "5", "--output",
                               str(tmp_path / "c.png"))
    assert rc == 0, err
    body = out.split(CAPTION)[0]
    assert "regression" not in err and "×" not in body
    assert body.count("cannot tell !") == 2  # timed on a busy machine: nothing said
    assert "nothing said for 2 (lstm·aten·small·cpu was timed on a busy machine)" in out
    (line,) = err.strip().splitlines()
    assert line.startswith("warning: 2 of 2 cells (marked !) compare runs timed on a machine")


def test_two_sweeps_measured_apart_are_judged_run_against_run(real_sweep, tmp_path, capsys):
    """Two copies of one sweep with a 20% level shift between them, no drift history: the
    gate does not fire, and the table says it cannot tell (not "significant")."""
    a = with_rounds(real_sweep, tmp_path / "a", seed=3, slower={})
    b = with_rounds(real_sweep, tmp_path / "b", seed=4, slower={"lstm": 1.2, "jit": 1.2})
    rc, out, err = run_compare(capsys, str(b), "--against", str(a), "--fail-on-regression",
                               "5", "--output", str(tmp_path / "c.png"))
    assert rc == 0, err
    body = out.split(CAPTION)[0]
    assert body.count("cannot tell") == 4 and "no match" not in body
    assert "4 run against run" in out and "no drift history" in out


def test_baseline_on_a_plain_field_and_its_errors(real_sweep, tmp_path, capsys):
    sweep = with_rounds(real_sweep, tmp_path / "s", seed=5, slower={})
    rc, out, err = run_compare(capsys, str(sweep), "--baseline", "model.family=gru",
                               "--output", str(tmp_path / "c.png"))
    assert rc == 2 and "matches no timed run" in err and "was lstm" in err
    rc, _, err = run_compare(capsys, str(sweep), "--baseline", "modle=lstm")
    assert rc == 2 and "did you mean model?" in err and "it varies in model" in err
    rc, out, err = run_compare(capsys, str(sweep), "--baseline", "seed=0", "--output",
                               str(tmp_path / "c.png"))
    assert rc == 0, err  # one run matches: the baseline of every row
    assert (tmp_path / "c.png").is_file()


def test_the_chart_is_named_by_what_it_shows(real_sweep, tmp_path, capsys, monkeypatch):
    sweep = with_rounds(real_sweep, tmp_path / "s", seed=6, slower={"jit": 2})
    monkeypatch.chdir(tmp_path)
    rc, out, _ = run_compare(capsys, str(sweep), "--baseline", "model=lstm")
    assert rc == 0
    (png,) = (tmp_path / "outputs" / "compare").glob("*.png")
    assert png.name == "s-vs-lstm.png" and f"chart: outputs/compare/{png.name}" in out


@pytest.mark.slow
def test_two_real_sweeps_compare_a_b_through_the_cli_and_the_store(run_here, tmp_path, capsys):
    for name in ("A", "B"):
        proc = run_here(*SWEEP, multirun=True)
        assert proc.returncode == 0, proc.stderr
        shutil.move(tmp_path / "sweep", tmp_path / name)
    rc, out, err = run_compare(capsys, str(tmp_path / "B"), "--against", str(tmp_path / "A"),
                               "--fail-on-regression", "5", "--output", str(tmp_path / "c.png"))
    assert rc == 0, err  # two sweeps run apart: never a false alarm from their levels
    body = out.split(CAPTION)[0]
    assert "vs baseline" in body and "no match" not in body
    # The same two sweeps through the MLflow store, each run read from its results.json.
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rnnexp").experiment_id
    parents = client.search_runs([exp], "tags.`rnnexp.kind` = 'sweep'",
                                 order_by=["attributes.start_time ASC"])
    assert len(parents) == 2
    rc, out2, err = run_compare(capsys, parents[1].info.run_id, "--against",
                                parents[0].info.run_id, "--tracking-uri", uri,
                                "--output", str(tmp_path / "c.png"))
    assert rc == 0, err
    assert "no match" not in out2.split(CAPTION)[0]
    assert all(r.status == OK for _, r in load_jobs(tmp_path / "B"))


def test_bad_arguments_are_one_line(capsys, tmp_path):
    rc, _, err = run_compare(capsys, "--fail-on-regression", "5")
    assert rc == 2 and err.strip() == ("error: --fail-on-regression needs a baseline — add "
                                       "--against SWEEP or --baseline KEY=VALUE")
    rc, _, err = run_compare(capsys, str(tmp_path), "--against", str(tmp_path))
    assert rc == 2 and "no results.json under this folder" in err
    rc, _, err = run_compare(capsys, "--against", "x", "--baseline", "model=lstm")
    assert rc == 2 and "choose one" in err


def test_results_keep_their_raw_samples(real_sweep):
    for _, result in load_jobs(real_sweep):
        assert isinstance(result, Result)
        assert len(result.phases["forward"].samples_ms) == result.phases["forward"].n == 3


def test_rows_are_named_by_what_varies_a_deepbench_problem_standing_for_its_shape():
    from types import SimpleNamespace

    runs = [SimpleNamespace(config={"model": "lstm", "deepbench": name, "shape": "default",
                                    "shape.hidden_size": h, "model.family": "lstm"})
            for name, h in (("speech-1", "512"), ("speech-2", "1024"))]
    assert compare_render.varying(runs) == ["deepbench"]
    runs[1].config["model"], runs[1].config["model.family"] = "gru", "gru"
    assert compare_render.varying(runs) == ["model", "deepbench"]


@pytest.mark.parametrize("content, problem", [
    ("", "is empty"),
    ('{"status": "ok", "choices": {', "is not complete JSON"),
    ('{"status": "ok", "choices": {}, "overrides": [], "config": {}}',
     "says ok but holds no timed phase"),
])
def test_a_broken_results_file_is_named_in_one_line_and_never_counted(real_sweep, tmp_path,
                                                                       capsys, content,
                                                                       problem):
    sweep = tmp_path / "s"
    shutil.copytree(real_sweep, sweep)
    (sweep / "1" / "results.json").write_text(content)
    rc, out, err = run_compare(capsys, str(sweep), "--output", str(tmp_path / "c.png"))
    assert rc == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line == f"error: {sweep / '1' / 'results.json'}: {problem}" or \
        (line.startswith(f"error: {sweep / '1' / 'results.json'}: ") and problem in line)


def test_a_bad_argument_is_one_line_not_the_usage(capsys):
    rc, _, err = run_compare(capsys, "--fail-on-regression", "abc")
    assert rc == 2
    (line,) = err.strip().splitlines()
    assert "--fail-on-regression: invalid float value: 'abc'" in line and "--help" in line


def test_runs_pair_by_their_measurement_whatever_code_took_them_and_wherever_it_went():
    from rnnexp.analysis.sweeps import Run

    samples = Samples(forward_ms=[1.0, 1.1, 0.9], backward_ms=[2.0, 2.1, 1.9])

    def run(commit: str, seed: int, iters: int, sinks: list[str]) -> Run:
        config = {"model": {"build": {"_target_": "m"}}, "shape": {"seq_len": 8}, "seed": seed,
                  "dtype": "float32", "sinks": sinks, "bench": {"iters": iters}}
        return Run.of(f"{commit}{seed}{iters}", Result(
            choices={"model": "lstm"}, overrides=[], config=config, status=OK,
            git_commit=commit, phases=phase_stats(samples, work())))

    after = [run("b", seed, iters, ["json"]) for seed in (0, 1) for iters in (10, 20)]
    before = [run("a", seed, iters, ["json", "mlflow"]) for seed in (0, 1)
              for iters in (10, 20)]
    bases = compare.baselines_across(after, before)
    # The same measurement taken the same way: seed and iteration count both match.
    assert [b.row.job for b in bases] == ["a010", "a020", "a110", "a120"]
    # Within one sweep, a baseline seed pairs each run with the run taken the same way.
    within = compare.baselines_within(after, "seed", "0")
    assert [b.row.job for b in within] == ["b010", "b020", "b010", "b020"]
