"""Comparisons with significance: an injected slowdown trips the regression gate, identically
distributed samples (A/A) do not, and two real sweeps compare A/B through the CLI."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from rnnexp import compare, significance
from rnnexp.environment import BUSY, Environment
from rnnexp.results import OK, Result, phase_stats
from rnnexp.sinks import load_jobs
from rnnexp.timing import Samples
from tests.conftest import TINY

SWEEP = ["model=lstm,jit", "backend=aten", "device=cpu", *TINY]
N = 60  # synthetic samples per phase


@pytest.fixture(scope="module")
def real_sweep(tmp_path_factory):
    """One real two-job sweep folder (shared; tests copy it before changing anything)."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    tmp = tmp_path_factory.mktemp("sweep")
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db"}
    proc = subprocess.run([sys.executable, "-m", "rnnexp", "-m", *SWEEP, "sinks=[json]",
                           f"hydra.sweep.dir={tmp}/sweep"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return tmp / "sweep"


def with_samples(src: Path, dst: Path, seed: int, slower: dict[str, float],
                 flags: tuple[str, ...] = ()) -> Path:
    """A copy of a real sweep folder whose samples are replaced by synthetic ones: lognormal
    around 1 ms (5% spread), times `slower[model]` for the named models; the machine record
    says what `flags` say (not what the real run met)."""
    shutil.copytree(src, dst)
    rng = np.random.default_rng(seed)
    for folder, result in load_jobs(dst):
        factor = slower.get(result.choices["model"], 1.0)
        fwd = (factor * rng.lognormal(0.0, 0.05, N)).tolist()
        bwd = (2 * factor * rng.lognormal(0.0, 0.05, N)).tolist()
        result.phases = phase_stats(Samples(fwd, bwd), result.work)
        result.environment = Environment(flags=list(flags), warnings=list(flags))
        result.save(folder)
    return dst


def run_compare(capsys, *args: str) -> tuple[int, str, str]:
    rc = compare.main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_an_injected_slowdown_trips_the_gate(real_sweep, tmp_path, capsys):
    before = with_samples(real_sweep, tmp_path / "before", seed=1, slower={})
    after = with_samples(real_sweep, tmp_path / "after", seed=2, slower={"jit": 1.2})
    rc, out, err = run_compare(capsys, str(after), "--against", str(before),
                               "--fail-on-regression", "10", "--output",
                               str(tmp_path / "c.png"))
    assert rc == compare.EXIT_REGRESSION, err
    lines = err.strip().splitlines()
    assert len(lines) == 2  # forward and backward of the slowed model, nothing else
    assert all("regression: jit·aten·small·cpu" in ln for ln in lines)
    found = {m[1]: float(m[2]) for ln in lines
             for m in [re.search(r"(fwd|bwd) ([\d.]+)% slower", ln)]}
    assert set(found) == {"fwd", "bwd"} and all(12 < pct < 30 for pct in found.values())
    assert "0.8" in out and "~" in out  # the slowed cells and the unchanged lstm cells
    # A threshold above the injected slowdown does not trip.
    rc, _, _ = run_compare(capsys, str(after), "--against", str(before),
                           "--fail-on-regression", "30", "--output", str(tmp_path / "c.png"))
    assert rc == 0


def test_an_a_a_comparison_of_identical_distributions_does_not_trip(real_sweep, tmp_path,
                                                                    capsys):
    a = with_samples(real_sweep, tmp_path / "a", seed=3, slower={})
    b = with_samples(real_sweep, tmp_path / "b", seed=4, slower={}, flags=(BUSY,))
    rc, out, err = run_compare(capsys, str(b), "--against", str(a), "--fail-on-regression",
                               "1", "--min-effect", "0", "--output", str(tmp_path / "c.png"))
    assert rc == 0, err
    body = out.split("median ± IQR/2")[0]
    assert "regression" not in err and "×" not in body and body.count("~ !") == 4
    # b was timed on a busy machine: said once, every cell marked.
    (line,) = err.strip().splitlines()
    assert line.startswith("warning: 4 of 4 cells (marked !) compare runs timed on a machine")


def test_a_a_false_alarms_stay_within_the_error_rate():
    """Over 200 A/A comparisons of 4 cells each, Holm keeps the family-wise false-alarm rate
    at or below 5% (with a binomial margin)."""
    rng = np.random.default_rng(7)
    trips = 0
    for _ in range(200):
        pairs = [(rng.lognormal(0, 0.05, 30), rng.lognormal(0, 0.05, 30)) for _ in range(4)]
        trips += any(d.real for d in significance.judge(pairs, min_effect=0.0))
    assert trips <= 20  # 5% of 200 = 10 expected at most; P(>20) is negligible


def test_holm_adjusts_in_step_down_order():
    assert significance.holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert significance.holm([]) == []


def test_a_small_difference_below_min_effect_is_shown_as_same():
    rng = np.random.default_rng(0)
    base = rng.lognormal(0, 0.01, 200)
    (d,) = significance.judge([(base, base * 1.02)], min_effect=0.03)
    assert d.p_holm < 1e-6 and not d.real and d.cell() == "~"
    (d,) = significance.judge([(base, base * 1.02)], min_effect=0.01)
    assert d.real and d.verdict == "slower" and d.low < 1 / 1.02 < d.high + 1e-3


@pytest.mark.slow
def test_two_real_sweeps_compare_a_b_through_the_cli(run_cli, tmp_path, capsys):
    for name in ("A", "B"):
        proc = run_cli(*SWEEP, multirun=True)
        assert proc.returncode == 0, proc.stderr
        shutil.move(tmp_path / "sweep", tmp_path / name)
    rc, out, err = run_compare(capsys, str(tmp_path / "B"), "--against", str(tmp_path / "A"),
                               "--fail-on-regression", "5", "--output", str(tmp_path / "c.png"))
    # bench=quick: 3 samples a side can never be significant (smallest U-test p is 0.1).
    assert rc == 0, err
    body = out.split("median ± IQR/2")[0]  # the table without its caption
    assert "vs baseline" in body and "no match" not in body and body.count("~") == 4
    # The same two sweeps through the MLflow store, named by their parent runs.
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rnnexp").experiment_id
    parents = client.search_runs([exp], "tags.`rnnexp.kind` = 'sweep'",
                                 order_by=["attributes.start_time ASC"])
    assert len(parents) == 2
    rc, out, err = run_compare(capsys, parents[1].info.run_id, "--against",
                               parents[0].info.run_id, "--tracking-uri", uri,
                               "--output", str(tmp_path / "c.png"))
    assert rc == 0, err
    body = out.split("median ± IQR/2")[0]
    assert "no match" not in body and body.count("~") == 4
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
