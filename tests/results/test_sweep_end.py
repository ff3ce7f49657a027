"""A sweep's end says where its results went and what to run next: one table for all its
jobs, its folder, its jobs by name (rnnexp.results.job_links), its summary files, and a
`rnnexp compare` command that works as printed."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rnnexp.measure.records import Samples
from rnnexp.models.work import Work
from rnnexp.results import job_links, summary
from rnnexp.results.result import OK, UNSUPPORTED, Result, phase_stats
from rnnexp.results.sinks import load_jobs
from rnnexp.results.sinks.console import next_command, where_it_went
from tests.conftest import ROOT, TINY, rnnexp_here

WORK = Work(flops_fwd=1e9, flops_bwd=2e9, bytes_fwd=1e6, bytes_bwd=2e6, tokens=1000)


def result(model: str, overrides: list[str] = (), status: str = OK) -> Result:
    samples = Samples(forward_ms=[1.0, 1.1, 1.2], backward_ms=[2.0, 2.1, 2.2])
    return Result(choices={"model": model, "backend": "aten", "shape": "small",
                           "device": "cpu"}, overrides=[f"model={model}", *overrides],
                  config={}, status=status, device="cpu", dtype="float32",
                  phases=phase_stats(samples, WORK) if status == OK else {})


def sweep_of(folder: Path, results: list[Result]) -> list[tuple[Path, Result]]:
    jobs = []
    for num, r in enumerate(results):
        (folder / str(num)).mkdir(parents=True)
        r.save(folder / str(num))
        jobs.append((folder / str(num), r))
    return jobs


def test_jobs_are_named_by_what_tells_them_apart():
    assert job_links.names([(Path("0"), result("lstm")), (Path("1"), result("jit"))]) == \
        ["lstm", "jit"]
    # The same label: the overrides they differ in, then the folder.
    seeds = [(Path(str(i)), result("lstm", [f"seed={i}", "bench=quick"])) for i in range(2)]
    assert job_links.names(seeds) == ["lstm·aten·small·cpu,seed=0", "lstm·aten·small·cpu,seed=1"]
    # A sweep over two keys, one of them not in the label: told apart within each model.
    grid = [(Path(str(i)), result(m, [f"bench.iters={n}"]))
            for i, (m, n) in enumerate([("lstm", 3), ("lstm", 4), ("gru", 3), ("gru", 4)])]
    assert job_links.names(grid) == ["lstm,bench.iters=3", "lstm,bench.iters=4",
                                     "gru,bench.iters=3", "gru,bench.iters=4"]
    repeats = [(Path(str(i)), result("lstm")) for i in range(2)]
    assert job_links.names(repeats) == ["lstm·aten·small·cpu#0", "lstm·aten·small·cpu#1"]
    odd = [(Path("0"), result("lstm", ["bench.python=/a/bin/python"])),
           (Path("1"), result("lstm", ["bench.python=/b/bin/python"]))]
    assert all("/" not in n for n in job_links.names(odd))


def test_job_links_survive_a_move_and_a_copy_never_counts_a_job_twice(tmp_path):
    jobs = sweep_of(tmp_path / "sweep", [result("lstm"), result("jit")])
    assert job_links.link(tmp_path / "sweep", jobs) == {
        "lstm": tmp_path / "sweep" / "0", "jit": tmp_path / "sweep" / "1"}
    assert os.readlink(tmp_path / "sweep" / "jobs" / "jit") == "../1"
    moved = Path(shutil.move(tmp_path / "sweep", tmp_path / "moved"))
    assert (moved / "jobs" / "jit" / "results.json").is_file()
    assert len(load_jobs(moved)) == 2
    copied = shutil.copytree(moved, tmp_path / "copied", symlinks=False)  # links followed
    assert (copied / "jobs" / "jit").is_dir() and not (copied / "jobs" / "jit").is_symlink()
    assert [f.name for f, _ in load_jobs(copied)] == ["0", "1"]
    # Linked again with other jobs (a resumed sweep): a link no longer a job's goes.
    job_links.link(moved, [(moved / "1", jobs[1][1])])
    assert sorted(p.name for p in (moved / "jobs").iterdir()) == ["jit·aten·small·cpu"]


def test_the_end_names_the_folder_its_jobs_its_files_and_the_next_command(tmp_path,
                                                                         monkeypatch):
    folder = tmp_path / "sweep"
    jobs = sweep_of(folder, [result("lstm"), result("jit"), result("py", status=UNSUPPORTED)])
    summary.write(folder, jobs)
    job_links.link(folder, jobs)
    monkeypatch.chdir(tmp_path)
    assert where_it_went(folder, jobs) == [
        "sweep: sweep/",
        "  jobs/lstm → 0/ · jobs/jit → 1/ · jobs/py → 2/  (each: results.json, .hydra/)",
        "  summary/ summary.json · summary.csv · summary.md · fwd_bwd.png (chart)",
        "next: rnnexp compare sweep --baseline model=lstm"]
    # Nothing to compare with one timed job; without a swept override, the group that varies.
    assert next_command(folder, [result("lstm")]) == ""
    plain = [result("lstm"), result("jit")]
    for r in plain:
        r.overrides = []
    assert next_command(folder, plain) == "rnnexp compare sweep --baseline model=lstm"
    same = [result("lstm", ["seed=1"]), result("lstm", ["seed=2"])]
    assert next_command(tmp_path / "my sweep", same) == \
        "rnnexp compare 'my sweep' --baseline seed=1"


@pytest.mark.slow
def test_a_real_sweep_prints_one_table_then_where_and_its_next_command_runs(tmp_path):
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}
    proc = rnnexp_here("-m", "model=lstm,jit", "backend=aten", *TINY, "sinks=[json,console]",
                       f"hydra.sweep.dir={tmp_path}/sweep", store=env["MLFLOW_TRACKING_URI"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.count("┏") == 1 and "rnnexp sweep: 2 jobs" in out  # no table per job
    assert "results: " not in out  # each job's folder is named at the end instead
    assert f"sweep: {tmp_path}/sweep/" in out
    assert "jobs/lstm → 0/ · jobs/jit → 1/" in out
    assert (tmp_path / "sweep" / "jobs" / "jit" / "results.json").is_file()
    (command,) = [ln.removeprefix("next: ") for ln in out.splitlines()
                  if ln.startswith("next: ")]
    assert command == f"rnnexp compare {tmp_path}/sweep --baseline model=lstm"
    args = shlex.split(command)[1:]
    ran = subprocess.run([sys.executable, "-m", "rnnexp", *args, "--output",
                          str(tmp_path / "c.png")], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert "jit" in ran.stdout and (tmp_path / "c.png").is_file()


def test_each_reason_for_a_flag_is_said_once_for_the_jobs_it_was_true_of():
    from rnnexp.machine.environment import Environment
    from rnnexp.results.sinks.console import sweep_warnings

    jobs = []
    for num, (model, iqr) in enumerate([("lstm", 24), ("jit", 39), ("py", None)]):
        r = result(model)
        r.environment = Environment()
        r.environment.flag("busy", "machine busy: other processes used 1.3 of 2 cores")
        if iqr is not None:
            r.environment.flag("high_spread", f"spread high: forward IQR {iqr}% of median")
        jobs.append((Path(str(num)), r))
    assert sweep_warnings(jobs) == [
        "timings may not be trustworthy in 3 jobs (lstm, jit, py): machine busy: other "
        "processes used 1.3 of 2 cores",
        "timings may not be trustworthy in 2 jobs (lstm, jit): spread high: forward IQR 24% "
        "of median — lstm's figures; each job's are in its results.json"]
