"""rnnexp history: series over commits and torch versions, change points found on replicates.

The decisions on synthetic series (a change found or not, a burst, a single off run); the
series split by machine; and through the command, a real MLflow store holding copies of a
real run recorded as different commits, torch versions and machines.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from rnnexp.analysis import change_points, history
from rnnexp.analysis.sweeps import Run
from rnnexp.app.commands import run_command
from rnnexp.app.commands.sync import sync_folder
from rnnexp.machine.platform import Platform
from rnnexp.results import exit_codes
from rnnexp.results.result import CountStats, Instructions, Result
from tests.browser import open_report
from tests.conftest import TINY, rnnexp_here

RUNS, PROCESSES = 60, 3


def replicates(rng, step: float = 0.0, at: int = RUNS // 2, between: float = 0.02,
               within: float = 0.05, n: int = RUNS) -> list[list[float]]:
    """Runs of PROCESSES replicates: a level that moves `between` (σ of logs) from run to run
    and `within` between a run's processes; × (1 + step) from run `at` on."""
    out = []
    for i in range(n):
        level = math.log1p(step) * (i >= at) + rng.normal(0, between)
        out.append(list(np.exp(level + rng.normal(0, within, PROCESSES))))
    return out


@pytest.mark.parametrize("step", [0.05, 0.10, -0.10])
def test_a_step_is_found_where_it_is_with_its_size_in_the_interval(step):
    found = change_points.change_points(replicates(np.random.default_rng(2), step=step))
    assert len(found) == 1
    at, shift = found[0]
    assert abs(at - RUNS // 2) <= (0 if abs(step) >= 0.1 else 2)
    assert shift.pvalue <= history.ALPHA and shift.low * step > 0  # excludes no change
    if abs(step) >= 0.1:
        assert shift.low < step < shift.high


def test_no_change_in_series_that_only_drift_from_run_to_run():
    rng = np.random.default_rng(2)
    found = [change_points.change_points(replicates(rng)) for _ in range(20)]
    assert sum(len(f) for f in found) <= 1  # α = 0.001 per test, a few tests per series


def test_one_run_off_the_level_is_a_burst_not_a_change():
    reps = replicates(np.random.default_rng(3))
    reps[-1] = [v * 1.5 for v in reps[-1]]  # the newest run, 50% slower
    reps[20] = [v * 1.5 for v in reps[20]]
    assert change_points.change_points(reps) == []
    reps[-2] = [v * 1.5 for v in reps[-2]]  # a second run agrees: now it is a change
    assert [i for i, _ in change_points.change_points(reps)] == [RUNS - 2]


def test_a_process_hit_by_a_burst_counts_less_than_the_runs_that_agree():
    rng = np.random.default_rng(4)
    reps = replicates(rng, step=0.05, within=0.02)
    for i in range(0, RUNS, 4):  # every fourth run: one process 2× slower
        reps[i][0] *= 2
    assert [i for i, _ in change_points.change_points(reps)] == [RUNS // 2]
    # One number per run (the mean) is dragged by those bursts: Otava on it misses the step.
    means = [float(np.mean(r)) for r in reps]
    assert RUNS // 2 not in change_points.otava_defaults(means)


def test_too_short_a_series_has_no_change():
    assert change_points.change_points([[1.0, 1.0], [2.0, 2.0], [2.0, 2.0]]) == []


# Series from runs ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """One real three-process run's folder (copies are varied, never it)."""
    tmp = tmp_path_factory.mktemp("run")
    proc = rnnexp_here("model=lstm", "backend=aten", *TINY, "bench.processes=3",
                       "bench.num_threads=1", "bench.roofline=false", "sinks=[json]",
                       f"hydra.run.dir={tmp}/run", store=f"sqlite:///{tmp}/mlflow.db")
    assert proc.returncode == 0, proc.stderr
    return tmp / "run"


COUNT = 2.0e6  # instructions per fwd+bwd iteration of the synthetic counts


def counted(factor: float, rng) -> Instructions:
    """Counts of two counting processes about COUNT × factor, 0.1% apart (as counts repeat)."""
    phases = {name: CountStats.of([[share * COUNT * factor * math.exp(rng.normal(0, 0.001))]
                                   for _ in range(2)], None)
              for name, share in (("forward", 0.4), ("backward", 0.6), ("total", 1.0))}
    return Instructions(phases=phases)


def varied(result: Result, n: int, factor: float, commit: str, torch: str,
           device_name: str = "", rng=None, counts: float = 0.0) -> Result:
    """A copy of a real result as the n-th run of a history: its processes' medians drawn
    about its median × factor (2% between runs, 3% between processes), recorded as `commit`
    and `torch` on `device_name`; with `counts`, instruction counts about COUNT × counts."""
    rng = rng or np.random.default_rng(n)
    out = copy.deepcopy(result)
    out.instructions = counted(counts, rng) if counts else None
    shift = factor * math.exp(rng.normal(0, 0.02))
    for phase in out.phases.values():
        if phase.timed:
            phase.process_medians_ms = [phase.median_ms * shift * math.exp(rng.normal(0, 0.03))
                                        for _ in phase.process_medians_ms]
            phase.median_ms = float(np.median(phase.process_medians_ms))
    out.git_commit = commit
    out.platform = dataclasses.replace(out.platform or Platform(torch_version=""),
                                       torch_version=torch)
    out.device_name = device_name or out.device_name
    start = datetime(2026, 11, 1, tzinfo=timezone.utc) + timedelta(hours=n)
    out.started_at = start.isoformat()
    return out


def test_runs_of_another_machine_are_another_series_and_versions_one(real_run):
    base = Result.load(real_run / "results.json")
    runs = [Run.of(str(n), varied(base, n, 1.0, f"c{n // 3}", "2.13.0" if n < 6 else "2.14.1",
                                  "cpu A" if n % 2 else "cpu B")) for n in range(12)]
    wider = copy.deepcopy(base)
    wider.timing.threads = 2  # the same device with more threads: another series too
    runs.append(Run.of("12", varied(wider, 12, 1.0, "c4", "2.14.1", "cpu A")))
    found = history.build(runs, "auto", {})
    assert sorted((str(s.machine), len(s.points)) for s in found) == [
        ("cpu A, 1 threads", 6), ("cpu A, 2 threads", 1), ("cpu B, 1 threads", 6)]
    for s in found:  # in the order they started, whatever commit and torch took them
        assert [p.started_at for p in s.points] == sorted(p.started_at for p in s.points)
    a = next(s for s in found if str(s.machine) == "cpu A, 1 threads")
    assert {p.torch for p in a.points} == {"2.13.0", "2.14.1"} and len(
        {p.commit for p in a.points}) == 4


@pytest.fixture(scope="module")
def store_uri(real_run, tmp_path_factory) -> str:
    """A real MLflow store with 24 runs of one measurement: 8 commits, two torch versions,
    10% slower from commit c4 on; its instruction counts 10% more from c4 on and 3% more
    again from c7 (the last three runs); and 6 runs of another machine, never slower."""
    tmp = tmp_path_factory.mktemp("store")
    base = Result.load(real_run / "results.json")
    rng = np.random.default_rng(7)
    for n in range(24):
        result = varied(base, n, 1.10 if n >= 12 else 1.0, f"{n // 3:02d}" * 20,
                        "2.13.0" if n < 18 else "2.14.1", rng=rng,
                        counts=(1.10 if n >= 12 else 1.0) * (1.03 if n >= 21 else 1.0))
        (tmp / "runs" / str(n)).mkdir(parents=True)
        result.save(tmp / "runs" / str(n))
    for n in range(6):
        result = varied(base, n, 1.0, f"{n:02d}" * 20, "2.13.0", "another cpu", rng=rng,
                        counts=1.0)
        (tmp / "other" / str(n)).mkdir(parents=True)
        result.save(tmp / "other" / str(n))
    uri = f"sqlite:///{tmp}/store.db"
    sync_folder(tmp / "runs", uri, "rnnexp")
    sync_folder(tmp / "other", uri, "rnnexp")
    return uri


def test_history_shows_the_change_from_a_real_store(store_uri, tmp_path, capsys):
    rc = run_command("history", ["model=lstm", "backend=aten", "--tracking-uri", store_uri,
                                 "--output", str(tmp_path / "charts")])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [ln for ln in out.splitlines() if "lstm·aten·small·cpu" in ln]
    assert len(rows) == 3, out  # two series (two machines) and one change
    change = next(ln for ln in rows if "→" not in ln and "+" in ln and "%" in ln)
    # From the last run of commit 03 to the first of 04, about +10% with its interval.
    assert "0303030" in change and "0404040" in change
    pct = float(change.split("%")[0].split()[-1])
    assert 8 < pct < 12
    charts = sorted(p.name for p in (tmp_path / "charts").glob("*.png"))
    assert len(charts) == 2 and any("another_cpu" in c for c in charts)


def test_a_selection_that_matches_nothing_is_one_line(store_uri, capsys):
    uri = store_uri
    assert run_command("history", ["modle=lstm", "--tracking-uri", uri]) == 2
    assert capsys.readouterr().err.strip().endswith("did you mean model?")
    assert run_command("history", ["model=gru", "--tracking-uri", uri]) == 2
    assert "model was lstm" in capsys.readouterr().err
    assert run_command("history", ["model", "--tracking-uri", uri]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
    assert run_command("history", ["--alpha", "2", "--tracking-uri", uri]) == 2
    assert "--alpha 2" in capsys.readouterr().err
    for args, says in ((["--fail-on-change", "-5"], "--fail-on-change -5: a size in percent"),
                       (["--latest", "0"], "--latest 0: at least 1"),
                       (["--report", "page.png"], "--report page.png: the page is an HTML file"),
                       (["--metric", "cycles"], "--metric: invalid choice: 'cycles'")):
        assert run_command("history", [*args, "--tracking-uri", uri]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err


def test_history_follows_instruction_counts(store_uri, tmp_path, capsys):
    """The counts see both changes, the 3% one the time's noise hides included."""
    rc = run_command("history", ["model=lstm", "--metric", "instructions", "--tracking-uri",
                                 store_uri, "--output", str(tmp_path / "charts")])
    out = capsys.readouterr().out
    assert rc == 0, out
    sizes = sorted(float(x) for x in re.findall(r"([+-]\d+\.\d)% \(", out))  # size (95%)
    assert len(sizes) == 2 and 2.5 < sizes[0] < 3.5 and 9 < sizes[1] < 11, out
    assert re.search(r"\b2\.2\d*e\+06\b", out)  # levels in instructions, not ms


def test_a_ci_gate_fails_on_a_recent_change_of_its_size_and_direction(store_uri, capsys):
    def gate(*args: str) -> int:
        return run_command("history", ["model=lstm", "--tracking-uri", store_uri,
                                       "--output", os.devnull + "-charts", *args])

    # Counts: the 3% change starts among the last 5 runs; the 10% one does not.
    assert gate("--metric", "instructions", "--fail-on-change", "2") == exit_codes.REGRESSION
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "+3." in err[0] and "0707070" in err[0], err
    assert gate("--metric", "instructions", "--fail-on-change", "5") == 0
    assert gate("--metric", "instructions", "--fail-on-change", "5", "--latest", "15") == \
        exit_codes.REGRESSION
    assert gate("--metric", "instructions", "--fail-on-change", "1", "--latest", "24",
                "--direction", "faster") == 0
    # Time: the 10% change is 12 runs old.
    assert gate("--fail-on-change", "5") == 0
    assert gate("--fail-on-change", "5", "--latest", "12") == exit_codes.REGRESSION


def test_the_gate_reads_direction_and_recency_on_synthetic_series():
    rng = np.random.default_rng(3)
    s = history.Series(key=None, machine=history.Machine("cpu", 1), name="m")
    s.points = [history.Point(tuple(r)) for r in replicates(rng, step=-0.10, at=50)]
    history.detect(s)
    assert [c.index for c in s.changes] == [50]
    assert history.gate([s], 0.05, history.FASTER, latest=10) == [(s, s.changes[0])]
    assert history.gate([s], 0.05, history.EITHER, latest=10) == [(s, s.changes[0])]
    assert history.gate([s], 0.05, history.SLOWER, latest=10) == []
    assert history.gate([s], 0.15, history.FASTER, latest=10) == []
    assert history.gate([s], 0.05, history.FASTER, latest=9) == []


@pytest.mark.browser
def test_history_writes_its_series_as_a_page(store_uri, tmp_path, capsys, page):
    path = tmp_path / "history.html"
    assert run_command("history", ["model=lstm", "--tracking-uri", store_uri, "--output",
                                   str(tmp_path / "charts"), "--report", str(path)]) == 0
    assert f"report: {path}" in capsys.readouterr().out
    open_report(page, path)
    assert page.locator("#history article.series").count() == 2  # one per machine
    rows = page.locator("#history table.changes tbody tr")
    assert rows.count() == 1 and "slower" in rows.inner_text()
    assert "0404040" in rows.inner_text()  # the first run after the change: commit 04
    # Every run a point of its own (runs of one commit alike are still apart).
    assert page.locator("#fig-series-0 path.point").count() == 24
    assert page.remote_requests == [] and page.errors == []


def test_runs_of_one_process_fall_back_to_their_scatter():
    rng = np.random.default_rng(5)
    single = [[float(np.exp(rng.normal(math.log1p(0.10) * (i >= 20), 0.02)))]
              for i in range(40)]
    assert [i for i, _ in change_points.change_points(single)] == [20]
    flat = [[1.0]] * 20 + [[1.1]] * 20  # no scatter at all: the step is all there is
    assert [i for i, _ in change_points.change_points(flat)] == [20]
    assert change_points.change_points([[1.0]] * 40) == []
