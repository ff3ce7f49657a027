"""What answers before any measuring imports none of torch, MLflow or SciPy: the help page, a
command line's error (its grammar, options and a single run's values), and the argument
errors of the commands beside the app. Their time is in docs/benchmarks.md; here, which
modules the process loaded (a behaviour, not a timing)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, TINY

HEAVY = ("torch", "mlflow", "scipy", "pandas", "matplotlib")
# The program as `rnnexp ARGS` runs it, reporting at exit (its exit handlers still run:
# rnnexp.app.quick_exit) which of the heavy packages it had imported.
PROGRAM = """
import atexit, json, sys
atexit.register(lambda: print("LOADED " + json.dumps(
    [m for m in {heavy!r} if m in sys.modules]), file=sys.stderr))
sys.argv = ["rnnexp", *{args!r}]
from rnnexp.app.commands import main
main()
"""


def run(*args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    proc = subprocess.run([sys.executable, "-c", PROGRAM.format(heavy=HEAVY, args=args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    loaded = [line for line in proc.stderr.splitlines() if line.startswith("LOADED ")]
    assert loaded, proc.stderr
    return proc, json.loads(loaded[-1].removeprefix("LOADED "))


@pytest.mark.parametrize("args, code, says", [
    (["--help"], 0, "Usage:"),
    (["bench.iters=ten"], 2, "error: bench.iters: 'ten' is not a whole number"),
    (["device=gpu"], 2, "did you mean cuda?"),
    (["model=lstmm"], 2, "did you mean lstm?"),
    # A single run's values are checked before the `_target_` check imports the models.
    (["shape.hidden_size=-3"], 2, "error: shape.hidden_size: must be ≥ 1, got -3"),
    (["+bench.itters=50"], 2, "error: bench.itters: no such field — did you mean bench.iters?"),
    (["resume=true"], 2, "error: resume: only applies to a sweep"),
    (["compare", "--help"], 0, "usage: rnnexp compare"),
    (["compare", "--baseline"], 2, "error: argument --baseline: expected one argument"),
    (["compare", "--min-effect", "200"], 2, "error: --min-effect 200: a percentage"),
    (["report", "--bogus"], 2, "error: unrecognized arguments: --bogus"),
    (["report", "-o", "page.png"], 2, "error: -o page.png: the page is an HTML file — name it "
                                      "page.html"),
    (["matrix", "--models", "nope"], 2, "error: --models: no such option nope"),
])
def test_help_and_argument_errors_import_no_heavy_package(args, code, says):
    proc, loaded = run(*args)
    assert proc.returncode == code, proc.stderr
    assert says in proc.stdout + proc.stderr
    assert loaded == [], f"rnnexp {' '.join(args)} imported {loaded}"


def test_a_run_does_import_them():
    """The check above can fail: a command that measures loads torch in the same program."""
    proc, loaded = run("matrix", "--models", "lstm", "--backends", "aten")
    assert proc.returncode == 0, proc.stderr
    assert "torch" in loaded


def test_the_default_min_effect_is_significance_s():
    """compare's --min-effect default is repeated so its parser needs no SciPy."""
    from rnnexp.analysis import significance
    from rnnexp.app.commands import compare

    assert compare.MIN_EFFECT_PCT == pytest.approx(100 * significance.MIN_EFFECT)


def test_compare_reads_a_sweep_folder_without_torch_or_mlflow(tmp_path):
    """Results are plain data (rnnexp.measure.records): reading and judging a sweep folder
    needs neither torch nor MLflow (a store does need MLflow)."""
    sweep = subprocess.run([sys.executable, "-m", "rnnexp", "-m", "seed=0,1", *TINY,
                            "sinks=[json]", f"hydra.sweep.dir={tmp_path}/sweep"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    proc, loaded = run("compare", str(tmp_path / "sweep"), "--baseline", "seed=0")
    assert proc.returncode == 0, proc.stderr
    assert "seed" in proc.stdout and "torch" not in loaded and "mlflow" not in loaded, loaded
