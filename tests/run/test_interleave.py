"""Interleaved sweeps through rnnexp's Hydra launcher: a sweep's configurations measured
together in rounds, each job recorded as before; other launchers say they did not
interleave; windows bounded by bench.window and memory; A/B of two interpreters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import venv
from pathlib import Path
from typing import Optional

import psutil
import pytest
import torch

from rnnexp.errors import ConfigError
from rnnexp.measure import job
from rnnexp.results.result import CRASHED, OK, UNSUPPORTED
from rnnexp.run import interleave
from tests.conftest import TINY, choices_of, compose_cfg, kill_tree

FAULTY = "tests.faulty_models"


def results_of(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*/results.json"),
                                                       key=lambda p: int(p.parent.name))]


@pytest.mark.slow
def test_a_sweep_is_measured_in_one_interleaved_window(run_here, tmp_path):
    proc = run_here("model=lstm,jit", "backend=aten", *TINY, "sinks=[json]",
                    "bench.iters=12", multirun=True)
    assert proc.returncode == 0, proc.stderr
    assert "interleaved: jobs 0, 1 measured together" in proc.stderr
    a, b = results_of(tmp_path / "sweep")
    assert a["interleaving"]["window"] == b["interleaving"]["window"]
    assert a["interleaving"]["jobs"] == [0, 1] and a["timing"]["interleaved"]
    # Fixed counts are spread over the same rounds, every round measuring both.
    ra, rb = (r["phases"]["forward"]["rounds_ms"] for r in (a, b))
    assert interleave.MIN_ROUNDS <= len(ra[0]) == len(rb[0]) <= 12
    assert None not in ra[0] + rb[0]


@pytest.mark.parametrize("launcher", [["hydra/launcher=basic"],
                                      ["hydra.launcher.interleave=false"]])
def test_other_launchers_say_they_did_not_interleave(run_here, tmp_path, launcher):
    proc = run_here("model=lstm,gru", "backend=aten", *TINY, "sinks=[json]", *launcher,
                    multirun=True)
    assert proc.returncode == 0, proc.stderr
    assert "interleaved:" not in proc.stderr
    for r in results_of(tmp_path / "sweep"):
        assert r["status"] == OK and not r["timing"]["interleaved"]
        assert "interleaving" not in r and not r["phases"]["forward"]["rounds_ms"]


def test_declined_and_crashing_jobs_leave_the_others_measured(run_cli, tmp_path):
    proc = run_cli(*TINY, "sinks=[json]", "backend=aten,cudnn",
                   f"model.build._target_=rnnexp.models.native.lstm,{FAULTY}.crashing",
                   multirun=True, env={"RNNEXP_TARGETS": "tests"})
    assert proc.returncode == 1, proc.stderr  # a crash fails the sweep
    statuses = [r["status"] for r in results_of(tmp_path / "sweep")]
    assert sorted(statuses) == sorted([OK, CRASHED, UNSUPPORTED, UNSUPPORTED])
    assert ("crashed: lstm(build._target_=crashing)·aten·small: ValueError: planted crash in "
            "the model factory") in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_bench_window_splits_a_sweep(run_here, tmp_path):
    proc = run_here("model=lstm,gru", "backend=aten", *TINY, "sinks=[json]", "bench.window=1",
                    multirun=True)
    assert proc.returncode == 0, proc.stderr
    a, b = results_of(tmp_path / "sweep")
    assert a["interleaving"]["window"] != b["interleaving"]["window"]
    assert a["interleaving"]["jobs"] == [0] and b["interleaving"]["jobs"] == [1]
    assert "(window 2 of 2)" in proc.stderr


def plans(*overrides: str) -> list[job.Plan]:
    from rnnexp.config.schema import validate

    cfg = compose_cfg(["device=cpu", *overrides])
    return [job.plan(validate(cfg), choices_of(cfg))]


def test_a_window_holds_what_fits_in_half_the_free_memory():
    small = plans(*TINY)[0]
    need = interleave.memory.estimate(small.cfg)
    per_config = need.host_bytes + need.device_bytes  # on the CPU: both in host memory
    group = [small] * 6
    assert interleave.fits(group, free={"host": 10 * per_config}) == 5  # half: 5 of them
    assert interleave.fits(group, free={"host": per_config}) == 1  # always at least one
    assert interleave.fits(group, free={"host": 1 << 60}) == 6
    windowed = plans(*TINY, "bench.window=2")[0]
    assert interleave.fits([windowed] * 6, free={"host": 1 << 60}) == 2


def test_another_interpreter_that_cannot_run_rnnexp_is_refused_in_one_line(run_here,
                                                                          tmp_path):
    proc = run_here(*TINY, "bench.python=/no/such/python")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: bench.python: /no/such/python is not an "
                                   "executable file — a Python interpreter of an environment "
                                   "with rnnexp installed, e.g. "
                                   "/path/to/checkout/.venv/bin/python")
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    with pytest.raises(ConfigError, match="cannot import rnnexp and torch"):
        job.check_python(str(bare / "bin" / "python"))


def environment_like_this_one(folder: Path) -> Path:
    """A second environment: its own interpreter, seeing this one's packages and checkout
    (a .pth file), as another checkout's venv would see its own."""
    venv.create(folder, with_pip=False)
    site = next(folder.glob("lib/python*/site-packages"))
    ours = [p for p in sys.path if p.endswith("site-packages")]
    root = Path(__file__).resolve().parents[2]
    (site / "others.pth").write_text("\n".join([*ours, str(root)]) + "\n")
    return folder / "bin" / "python"


@pytest.mark.slow
def test_an_a_b_of_two_interpreters_runs_interleaved_end_to_end(run_here, tmp_path):
    other = environment_like_this_one(tmp_path / "other")
    proc = run_here("model=jit", "backend=aten", *TINY, "sinks=[json]", "bench.iters=6",
                    f"bench.python={sys.executable},{other}", multirun=True)
    assert proc.returncode == 0, proc.stderr
    a, b = results_of(tmp_path / "sweep")
    assert a["interleaving"]["window"] == b["interleaving"]["window"]
    assert {a["config"]["bench"]["python"], b["config"]["bench"]["python"]} == \
        {sys.executable, str(other)}
    assert b["platform"]["torch_version"] == torch.__version__
    out = subprocess.run([sys.executable, "-m", "rnnexp", "compare", str(tmp_path / "sweep"),
                          "--baseline", f"bench.python={sys.executable}", "--output",
                          str(tmp_path / "c.png")], capture_output=True, text=True,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"}, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "cells judged: 2 paired by round" in out.stdout


def start_sweep(tmp_path: Path, *args: str) -> subprocess.Popen:
    from tests.conftest import ROOT

    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}
    return subprocess.Popen([sys.executable, "-m", "rnnexp", "-m", *args,
                             f"hydra.sweep.dir={tmp_path}/sweep"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def workers(parent: psutil.Process) -> list[psutil.Process]:
    found = []
    for child in parent.children(recursive=True):
        try:
            if "forkserver" in " ".join(child.parent().cmdline()):
                found.append(child)
        except (psutil.Error, AttributeError):
            continue
    return found


def parked(proc: subprocess.Popen) -> Optional[psutil.Process]:
    """A stopped worker of the sweep: only a worker that waits for its turn in the timed
    rounds is (rnnexp.run.interleave parks the others)."""
    for worker in workers(psutil.Process(proc.pid)):
        try:
            if worker.status() == psutil.STATUS_STOPPED:
                return worker
        except psutil.Error:
            continue
    return None


def cpu_s(worker: psutil.Process) -> float:
    times = worker.cpu_times()
    return times.user + times.system


ROUNDS = "bench.round_ms=1"  # the long job's share of a round: one sample, or about 1 ms


def signal_in_the_rounds(proc: subprocess.Popen, signum: int) -> str:
    """Send `signum` once the window's rounds of the sweep `proc` are well under way; its
    stderr. A failed wait leaves no sweep running."""
    try:
        deadline = time.monotonic() + 180
        while (worker := parked(proc)) is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the window never started its rounds"
            time.sleep(0.001)
        # A parked worker does nothing until the rounds start (after the sweep's start in the
        # sinks: seconds under load), so its CPU time counts the rounds alone. The short job
        # ends after its 3 rounds, and a round is a sample of each job (ROUNDS: a round of
        # ~1 ms), so 3 CPU-s of the worker are hundreds of rounds, however much a busy
        # machine slows and spins its threads. (A fixed sleep, then 3 CPU-s of 50-ms rounds,
        # were too short under CI's load.) The long job measures for many minutes.
        start = cpu_s(worker)
        while cpu_s(worker) - start < 3.0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the rounds never got 3 CPU-s"
            time.sleep(0.05)
        proc.send_signal(signum)
        return proc.communicate(timeout=120)[1]
    finally:
        kill_tree(proc)


@pytest.mark.slow
def test_a_scheduler_signal_ends_the_window_but_keeps_what_it_finished(tmp_path):
    proc = start_sweep(tmp_path, "model=lstm", "backend=aten", *TINY, "sinks=[json,mlflow]",
                       "bench.iters=3,1000000", ROUNDS)
    err = signal_in_the_rounds(proc, signal.SIGUSR2)
    assert proc.returncode == 0, err  # the sweep goes on
    done, killed = results_of(tmp_path / "sweep")
    assert done["status"] == OK and done["phases"]["forward"]["n"] == 3
    assert killed["status"] == "interrupted" and "SIGUSR2" in killed["reason"]


@pytest.mark.slow
def test_sigterm_in_the_rounds_records_the_finished_job_and_kills_the_other(tmp_path):
    from mlflow.tracking import MlflowClient

    proc = start_sweep(tmp_path, "model=lstm", "backend=aten", *TINY, "sinks=[json,mlflow]",
                       "bench.iters=3,1000000", ROUNDS)
    signal_in_the_rounds(proc, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM
    done, killed = results_of(tmp_path / "sweep")
    assert done["status"] == OK and killed["status"] == "interrupted"
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("rnnexp").experiment_id
    runs = client.search_runs([exp])
    statuses = sorted((r.data.tags["rnnexp.kind"], r.info.status) for r in runs)
    assert statuses == [("job", "FINISHED"), ("job", "KILLED"), ("sweep", "KILLED")]
