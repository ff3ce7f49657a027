"""Sweeps beyond one shell: submitit's local executor into a real `mlflow server`, jobs killed
by the scheduler's signal, resume, and one timing job per device (placement decisions on
simulated machines, and a real parallel CPU sweep)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rnnexp.config.schema import DeviceKind
from rnnexp.machine import placement
from rnnexp.machine.placement import Launch, Placement, launch_of, oversubscription, place
from tests import faulty_models
from tests.conftest import ROOT, TINY, kill_tree, load_results
from tests.results.test_tracking import runs_of

BASIC = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def sweep_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "rnnexp", "-m", *args]


def env_for(tmp_path: Path) -> dict:
    return {**os.environ, "PYTHONWARNINGS": "ignore",
            "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}


@pytest.mark.slow
def test_submitit_sweep_lands_in_a_server_as_one_parent_and_four_children(mlflow_server,
                                                                          tmp_path):
    proc = subprocess.run(sweep_cmd(
        "hydra/launcher=rnnexp_local", *TINY, "model=lstm,gru", "bench.iters=3,4",
        f"sinks.mlflow.uri={mlflow_server}", f"hydra.sweep.dir={tmp_path}/sweep"),
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=env_for(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "not reachable" not in proc.stderr + proc.stdout
    assert len(list((tmp_path / "sweep" / ".submitit").iterdir())) >= 4  # through submitit
    client, parents, children = runs_of(mlflow_server)
    assert len(parents) == 1 and len(children) == 4
    assert all(c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for c in children)
    assert [c.info.status for c in children] == ["FINISHED"] * 4
    assert sorted((c.data.params["model"], c.data.params["bench.iters"]) for c in children) == \
        [("gru", "3"), ("gru", "4"), ("lstm", "3"), ("lstm", "4")]
    # The parent was opened once, before any job, and closed with every job counted.
    assert parents[0].info.status == "FINISHED" and parents[0].data.tags["jobs"] == "4"
    assert parents[0].info.start_time < min(c.info.start_time for c in children)


@pytest.mark.slow
def test_a_job_at_its_time_limit_ends_killed_with_the_reason(tmp_path):
    # The job's first timed call waits (a pausing model: waiting costs no CPU, where timing a
    # minute would), and nothing tells it to go on: submitit's local executor signals it
    # (SIGUSR2) 30 s before its 1-minute limit, as SLURM does before a time limit or a
    # preemption.
    proc = subprocess.run(sweep_cmd(
        "hydra/launcher=rnnexp_local", "hydra.launcher.timeout_min=1", *TINY,
        f"model.build._target_={faulty_models.__name__}.pausing",
        f"hydra.sweep.dir={tmp_path}/sweep"),
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**env_for(tmp_path), "RNNEXP_TARGETS": "tests",
             faulty_models.STALLED_ENV: str(tmp_path / "timing")})
    assert (tmp_path / "timing").read_text().startswith("timing ")  # it was timing
    assert proc.returncode == 0, proc.stderr
    result = load_results(tmp_path / "sweep" / "0")
    assert result["status"] == "interrupted"
    assert result["reason"] == "killed: SIGUSR2 from the scheduler (time limit or preemption)"
    _, parents, [child] = runs_of(f"sqlite:///{tmp_path}/mlflow.db")
    assert child.info.status == "KILLED" and child.data.tags["reason"] == result["reason"]
    assert parents[0].info.status == "FINISHED"  # the sweep itself ended normally


def _signal_when_timing(proc: subprocess.Popen, job_dir: Path, signum: int) -> None:
    """Send `signum` to a basic-launcher sweep once job `job_dir` is under way (Hydra wrote
    its .hydra/config.yaml since `proc` started)."""
    started = time.time()
    deadline = time.monotonic() + 180
    config = job_dir / ".hydra" / "config.yaml"
    try:
        while not (config.exists() and config.stat().st_mtime >= started - 1):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.2)
    except BaseException:  # a failed wait leaves no sweep running
        kill_tree(proc)
        raise
    time.sleep(3)  # past the handler's installation, into build/verify/timing
    proc.send_signal(signum)


@pytest.mark.slow
def test_resume_skips_what_finished_and_reruns_what_was_killed(tmp_path):
    # One job after the other (a scheduler's signal reaches the job being measured).
    args = sweep_cmd(*TINY, "bench.iters=3,1000000,4", "sinks=[json,console,mlflow]",
                     "hydra/launcher=basic",
                     f"hydra.sweep.dir={tmp_path}/sweep")
    sweep = tmp_path / "sweep"

    first = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env_for(tmp_path))
    _signal_when_timing(first, sweep / "1", signal.SIGUSR2)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    # The sweep went on after the killed job.
    assert [load_results(sweep / str(n))["status"] for n in range(3)] == \
        ["ok", "interrupted", "ok"]
    before = {n: (sweep / str(n) / "results.json").read_text() for n in range(3)}

    second = subprocess.Popen([*args, "resume=true"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env_for(tmp_path))
    # Job 1 runs again (and is stopped again: its iteration count is meant to be cut).
    _signal_when_timing(second, sweep / "1", signal.SIGUSR2)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert f"resume: 2 of 3 jobs already measured in {sweep}" in " ".join(err.split())
    assert err.count("skipped:") == 2
    for n in (0, 2):  # untouched
        assert (sweep / str(n) / "results.json").read_text() == before[n]
    rerun = load_results(sweep / "1")
    assert rerun["status"] == "interrupted"
    assert (sweep / "1" / "results.json").read_text() != before[1]
    # One parent across both runs: 3 jobs of the first run + the re-run.
    _, parents, children = runs_of(f"sqlite:///{tmp_path}/mlflow.db")
    assert len(parents) == 1 and len(children) == 4
    assert parents[0].info.status == "FINISHED"
    assert sorted(c.info.status for c in children) == ["FINISHED", "FINISHED", "KILLED",
                                                        "KILLED"]


@pytest.mark.slow
def test_resume_does_not_skip_another_code_version(tmp_path, run_here):
    proc = run_here(*TINY, "model=lstm,gru", "sinks=[json]", multirun=True)
    assert proc.returncode == 0, proc.stderr
    results = tmp_path / "sweep" / "0" / "results.json"
    data = json.loads(results.read_text())
    data["git_commit"] = "0" * 40  # measured by another commit
    results.write_text(json.dumps(data))
    again = run_here(*TINY, "model=lstm,gru", "sinks=[json]", "resume=true", multirun=True)
    assert again.returncode == 0, again.stderr
    assert "resume: 1 of 2 jobs already measured" in " ".join(again.stderr.split())
    assert json.loads(results.read_text())["git_commit"] != "0" * 40  # job 0 ran again


# --- one timing job per device: decisions on simulated machines ---------------------------

JOBLIB_LAUNCHER = {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher."
                   "JoblibLauncher", "n_jobs": 4}
LOCAL_LAUNCHER = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher."
                  "LocalLauncher", "cpus_per_task": None}
SLURM_LAUNCHER = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher."
                  "SlurmLauncher", "cpus_per_task": 8}


def test_launch_counts_the_jobs_that_run_at_once():
    assert launch_of({"_target_": BASIC}, 10, cores=8) == Launch("basic")
    assert launch_of(JOBLIB_LAUNCHER, 10, cores=8).parallel == 4
    assert launch_of(JOBLIB_LAUNCHER, 2, cores=8).parallel == 2  # fewer jobs than workers
    assert launch_of({**JOBLIB_LAUNCHER, "n_jobs": -1}, 100, cores=8).parallel == 8
    assert launch_of({**JOBLIB_LAUNCHER, "n_jobs": -2}, 100, cores=8).parallel == 7
    assert launch_of(LOCAL_LAUNCHER, 6, cores=8).parallel == 6  # all at once
    slurm = launch_of(SLURM_LAUNCHER, 300, cores=64)
    assert slurm.parallel == 1 and slurm.cpus_per_task == 8


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_parallel_jobs_on_a_multi_gpu_node_each_get_a_gpu(gpus):
    launch = Launch("joblib", parallel=gpus)
    indexes = [place(n, launch, DeviceKind.cuda, gpus=gpus, cores=32, index_set=False,
                     threads_set=False).device_index for n in range(3 * gpus)]
    assert indexes == [n % gpus for n in range(3 * gpus)]
    # auto picks the GPU too; an explicit device.index is kept
    assert place(3, launch, DeviceKind.auto, gpus=gpus, cores=32, index_set=False,
                 threads_set=False).device_index == 3 % gpus
    assert place(3, launch, DeviceKind.cuda, gpus=gpus, cores=32, index_set=True,
                 threads_set=False) == Placement()


def test_serial_sweeps_and_single_gpus_are_left_alone():
    for launch, gpus in ((Launch("basic"), 4), (Launch("joblib", 2), 1),
                         (Launch("submitit_slurm", 1), 1)):
        assert place(5, launch, DeviceKind.cuda, gpus=gpus, cores=16, index_set=False,
                     threads_set=False) == Placement()


def test_parallel_cpu_jobs_divide_the_cores():
    def threads(launch, cores, threads_set=False):
        return place(0, launch, DeviceKind.cpu, gpus=0, cores=cores, index_set=False,
                     threads_set=threads_set).num_threads

    assert threads(Launch("joblib", 2), 2) == 1
    assert threads(Launch("joblib", 4), 64) == 16
    assert threads(Launch("submitit_local", 3), 8) == 2
    assert threads(Launch("joblib", 8), 2) == 1  # never 0
    assert threads(Launch("basic"), 64) is None  # a serial sweep keeps torch's default
    assert threads(Launch("joblib", 4), 64, threads_set=True) is None  # explicit wins
    assert threads(Launch("submitit_slurm", 1, cpus_per_task=8), 128) == 8
    # device=auto without a GPU is the CPU
    assert place(0, Launch("joblib", 2), DeviceKind.auto, gpus=0, cores=8, index_set=False,
                 threads_set=False).num_threads == 4


def test_oversubscription_is_one_line_and_only_when_it_happens():
    cpu = DeviceKind.cpu
    assert oversubscription(Launch("joblib", 2), cpu, gpus=0, cores=2) == ""
    line = oversubscription(Launch("joblib", 4), cpu, gpus=0, cores=2)
    assert "4 parallel jobs oversubscribe 2 CPU core(s)" in line and "\n" not in line
    assert "at most 2 parallel jobs (hydra.launcher.n_jobs=2)" in line
    assert "(hydra/launcher=joblib hydra.launcher.n_jobs=2)" in oversubscription(
        Launch("submitit_local", 4), cpu, gpus=0, cores=2)
    assert "× 4 threads" in oversubscription(Launch("joblib", 2), cpu, gpus=0, cores=4,
                                             threads=4)
    assert oversubscription(Launch("joblib", 2), DeviceKind.cuda, gpus=2, cores=2) == ""
    assert "3 parallel jobs on 2 GPU(s)" in oversubscription(Launch("joblib", 3),
                                                            DeviceKind.cuda, gpus=2, cores=64)
    assert oversubscription(Launch("basic"), cpu, gpus=0, cores=1) == ""


def test_gpu_lock_holds_a_gpu_for_one_job_at_a_time(tmp_path):
    import fcntl

    with placement.GpuLock(tmp_path, 1) as held:
        with open(held.path, "w") as other:  # a second job on GPU 1 would wait
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with placement.GpuLock(tmp_path, 0):  # another GPU is free
            pass
    with open(held.path, "w") as other:  # released when the job ends
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


@pytest.mark.slow
def test_parallel_cpu_sweep_divides_the_cores_and_records_it(run_cli, tmp_path):
    cores = placement.visible_cores()
    proc = run_cli(*TINY, "model=lstm,gru", "device=cpu", "sinks=[json]",
                   "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", multirun=True)
    assert proc.returncode == 0, proc.stderr
    for n in (0, 1):
        result = load_results(tmp_path / "sweep" / str(n))
        assert result["config"]["bench"]["num_threads"] == max(1, cores // 2)
        assert result["timing"]["threads"] == max(1, cores // 2)
    oversubscribed = "oversubscribe" in proc.stderr
    assert oversubscribed == (cores < 2)
