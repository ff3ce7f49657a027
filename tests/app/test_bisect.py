"""rnnexp bisect through the command, on real interpreters: environments made as a user would
(venvs over this one's packages), one of them slowed for real (oneDNN's RNN kernels off at
start-up), one that cannot run rnnexp at all."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rnnexp.app import environments
from rnnexp.app.commands import run_command

MEASUREMENT = ["model=lstm", "backend=aten", "shape=small", "bench.iters=12", "bench.warmup=3",
               "bench.processes=2", "bench.num_threads=1", "bench.roofline=false",
               "bench.drift=false"]


def venv(tmp: Path, name: str, startup: str = "", runs_rnnexp: bool = True) -> str:
    python = environments.overlay(tmp / name, sys.executable)
    site = Path(environments.purelib(str(python)))
    if not runs_rnnexp:
        (site / environments.BASE_PTH).unlink()
    if startup:
        (site / "zzz_startup.pth").write_text(startup + "\n")
    return str(python)


@pytest.mark.slow
def test_a_real_slowdown_is_found_and_a_broken_environment_is_no_slowdown(tmp_path, capsys):
    envs = [venv(tmp_path, "good"), venv(tmp_path, "broken", runs_rnnexp=False),
            venv(tmp_path, "same"),
            venv(tmp_path, "slow", "import torch; torch.backends.mkldnn.set_flags(False)")]
    rc = run_command("bisect", ["--pythons", *envs, "--workdir", str(tmp_path / "work"),
                                "--", *MEASUREMENT])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"culprit: {envs[3]} (environment 3" in out
    probes = [ln for ln in out.splitlines() if ln.startswith("probe ")]
    broken = [ln for ln in probes if "env 1 " in ln]
    # Declined before timing (its interpreter cannot import rnnexp): never read as a slowdown.
    assert broken and all("failed:" in ln and "cannot import rnnexp" in ln for ln in broken)
    assert any("env 2 " in ln for ln in probes)
    assert f"bench.python={envs[2]},{envs[3]}" in out  # the command that reproduces it


def test_bad_arguments_are_one_line(tmp_path, capsys):
    py = sys.executable
    cases = [
        (["--pythons", py, "--", "model=lstm"], "at least two interpreters"),
        (["--pythons", py, str(tmp_path / "nope"), "--", "model=lstm"], "not an executable"),
        (["--pythons", py, py], "no measurement named"),
        (["--pythons", py, py, "--", "bench.python=/x"], "sets bench.python itself"),
        (["--pythons", py, py, "--", "model=lstm,jit"], "one measurement at a time"),
        (["--commits", "nope", "--", "model=lstm"], "expected GOOD..BAD"),
        (["--commits", "HEAD~1..nope", "--repo", str(tmp_path), "--", "model=lstm"],
         "--commits HEAD~1..nope"),
        (["--pythons", py, py, "--confidence", "2", "--", "model=lstm"], "--confidence 2"),
    ]
    for argv, says in cases:
        assert run_command("bisect", argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err, (argv, err)
