"""The SLURM launcher's decisions, without a cluster: how a sweep is cut into tasks, what the
controller's answers say, what a job records of its SLURM task, how a comparison across
nodes is judged, and that SIGTERM in a batch task stops its jobs, not the sweep."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from rnnexp.analysis import nodes, significance
from rnnexp.app import slurm
from rnnexp.machine import scheduler
from rnnexp.machine.environment import Environment
from rnnexp.results.result import OK
from tests.conftest import ROOT, compose_cfg

# `scontrol -o show job 17` for an array of five tasks, one at a time, as SLURM 22.05 prints
# it (trimmed after the fields read): task 0 running, 1–4 pending in one record; then after
# scancel.
RUNNING = """\
JobId=17 ArrayJobId=17 ArrayTaskId=1-4%1 ArrayTaskThrottle=1 JobName=wrap JobState=PENDING Reason=JobArrayTaskLimit Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 NodeList=(null) ReqNodeList=(null)
JobId=18 ArrayJobId=17 ArrayTaskId=0 ArrayTaskThrottle=1 JobName=wrap JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=2 BatchFlag=1 NodeList=node2 ReqNodeList=(null) TRES=cpu=1,node=1
"""  # noqa: E501
CANCELLED = RUNNING.replace("PENDING", "CANCELLED").replace("RUNNING", "CANCELLED")


def test_a_sweep_is_cut_into_tasks_of_whole_windows():
    four = lambda n: 4  # noqa: E731 — bench.window of every job
    assert slurm.shards(range(10), four, 1) == [[[0, 1, 2, 3]], [[4, 5, 6, 7]], [[8, 9]]]
    assert slurm.shards(range(10), four, 2) == [[[0, 1, 2, 3], [4, 5, 6, 7]], [[8, 9]]]
    # Jobs a resumed sweep skips close a window: a window's jobs stay consecutive.
    assert slurm.shards([0, 1, 3, 4, 5], four, 1) == [[[0, 1]], [[3, 4, 5]]]
    assert slurm.shards(range(3), lambda n: 1, 1) == [[[0]], [[1]], [[2]]]  # interleave off
    # 1,000 cells at bench.window=8: 125 tasks of one window each, or 63 of two.
    assert len(slurm.shards(range(1000), lambda n: 8, 1)) == 125
    assert len(slurm.shards(range(1000), lambda n: 8, 2)) == 63
    assert slurm.jobs_text([0, 1, 2, 5, 7, 8]) == "0–2, 5, 7–8"


def test_the_controllers_answers_give_each_tasks_state_and_node():
    states = slurm.parse_scontrol(RUNNING)
    assert sorted(states) == [0, 1, 2, 3, 4]
    assert states[0] == slurm.TaskState("RUNNING", "node2", 2, "")
    assert states[3] == slurm.TaskState("PENDING", "", 0, "JobArrayTaskLimit")
    assert {s.state for s in slurm.parse_scontrol(CANCELLED).values()} == {"CANCELLED"}
    sacct = "17_0|COMPLETED|node1\n17_1|CANCELLED by 0|node2\n17_[2-4%1]|PENDING|None assigned\n"
    states = slurm.parse_sacct(sacct)
    assert [states[i].state for i in range(5)] == ["COMPLETED", "CANCELLED"] + ["PENDING"] * 3
    assert states[1].node == "node2" and states[4].node == ""


@dataclass
class Submitted:
    """What the launcher reads of a submitit job: its id and where its files go."""

    job_id: str
    paths: object


@dataclass
class Paths:
    result_pickle: Path
    stderr: Path


def test_waiting_follows_each_task_and_says_what_happened(tmp_path, capsys):
    jobs = [Submitted(f"17_{i}", Paths(tmp_path / f"{i}.pkl", tmp_path / f"{i}.err"))
            for i in range(2)]
    tasks = slurm.tasks_of(jobs, [[[0, 1]], [[2, 3]]])
    answers = iter([
        {0: slurm.TaskState("RUNNING", "node1"), 1: slurm.TaskState("PENDING")},
        {0: slurm.TaskState("PENDING", restarts=1), 1: slurm.TaskState("RUNNING", "node2")},
        {0: slurm.TaskState("RUNNING", "node1", 1), 1: slurm.TaskState("COMPLETED", "node2")},
        {0: slurm.TaskState("COMPLETED", "node1", 1), 1: slurm.TaskState("COMPLETED", "node2")},
    ])
    now = [0.0]
    slurm.wait(tasks, poll=lambda array: next(answers), sleep=lambda s: now.append(now.pop() + s),
               clock=lambda: now[0])
    err = capsys.readouterr().err
    assert "task 17_0 (jobs 0–1) running on node1" in err
    assert "task 17_0 (jobs 0–1) requeued (restart 1): what it measured is kept" in err
    assert "task 17_1 (jobs 2–3) ended COMPLETED on node2" in err
    assert [t.state.state for t in tasks] == ["COMPLETED", "COMPLETED"]
    assert tasks[0].nodes == ["node1"] and tasks[0].state.restarts == 1
    assert slurm.never_started(tasks) == []


def test_a_task_the_controller_forgot_ended_as_its_result_says(tmp_path):
    jobs = [Submitted(f"17_{i}", Paths(tmp_path / f"{i}.pkl", tmp_path / f"{i}.err"))
            for i in range(2)]
    jobs[0].paths.result_pickle.write_bytes(b"")
    tasks = slurm.tasks_of(jobs, [[[0]], [[1]]])
    slurm.wait(tasks, poll=lambda array: None, sleep=lambda s: None)
    assert [t.state.state for t in tasks] == ["COMPLETED", slurm.FORGOTTEN]


def test_a_job_records_the_slurm_task_it_ran_in():
    env = {"SLURM_JOB_ID": "42", "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "2",
           "SLURMD_NODENAME": "gpu07", "SLURM_RESTART_COUNT": "1"}
    job = scheduler.slurm_job(env)
    assert job == {"scheduler": "slurm", "node": "gpu07", "job_id": "42",
                   "array_job_id": "40", "array_task_id": "2", "restarts": "1"}
    assert scheduler.task_name(job) == "40_2"
    assert scheduler.slurm_job({"SLURMD_NODENAME": "x"}) == {}  # not in a SLURM job


@dataclass
class Stats:
    timed: bool = True


@dataclass
class Row:
    status: str = OK


@dataclass
class FakeResult:
    environment: Environment


@dataclass
class Measured:
    """What nodes.py reads of a compared run: its key, node, status and level."""

    key: str
    node: str
    medians: list[float]
    drift: float = 0.02
    row: Row = field(default_factory=Row)

    @property
    def result(self) -> FakeResult:
        return FakeResult(Environment(scheduler={"scheduler": "slurm", "node": self.node}))

    def level(self, phase: str) -> significance.Level:
        return significance.Level(self.medians, drift=self.drift, drift_runs=5)


def test_the_spread_between_nodes_comes_from_configurations_on_several_nodes():
    runs = [Measured("a", "n1", [10.0, 10.2]), Measured("a", "n2", [12.0, 12.1]),
            Measured("b", "n1", [5.0]), Measured("c", "n3", [7.0])]
    spread = nodes.spread([runs], "fwd")
    a1, a2 = (math.log(10.0) + math.log(10.2)) / 2, (math.log(12.0) + math.log(12.1)) / 2
    assert spread.df == 1 and spread.configurations == 1
    assert spread.variance == pytest.approx((a1 - a2) ** 2 / 2)
    assert nodes.spread([runs[2:]], "fwd") is None  # no configuration on two nodes
    # One configuration in two sweeps (an A/B) says nothing of the nodes: the sweeps differ.
    assert nodes.spread([runs[:1], runs[1:2]], "fwd") is None


def test_a_pair_across_nodes_is_wider_than_the_same_pair_on_one_node():
    base, run = Measured("a", "n1", [10.0, 10.3, 9.8]), Measured("b", "n2", [9.0, 9.2, 9.1])
    assert nodes.crossed(base, run) and nodes.crossings([run], [base]) == [(0, "n1 → n2")]
    same = significance.between_runs(base.level("fwd"), run.level("fwd"))
    wide = nodes.across(base, run, "fwd", nodes.Spread(0.01, 4, 2))
    assert wide.method == nodes.ACROSS and wide.speedup == pytest.approx(same.speedup)
    assert wide.half_width > same.half_width
    unknown = nodes.across(base, run, "fwd", None)
    assert math.isnan(unknown.low) and "different nodes (n1 vs n2)" in unknown.why_not
    assert unknown.cell() == "cannot tell"


def test_sigterm_in_a_batch_task_stops_its_job_and_is_remembered():
    """In a task, SIGTERM raises Killed (the job records itself interrupted and the sweep's
    parent is left alone); one that comes while a result is recorded is only noted."""
    code = textwrap.dedent("""
        import os, signal
        from rnnexp.run import signals
        signals.install()
        signals.sigterm_from_scheduler()
        signals.install()  # a job's run_job installs again: SIGTERM stays the scheduler's
        signals.stop_job_on_scheduler()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            import time; time.sleep(5)
        except signals.Killed as err:
            print("killed:", err)
        os.kill(os.getpid(), signal.SIGTERM)  # settled: noted, not raised
        print("signalled:", signals.scheduler_signalled() == signal.SIGTERM)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr
    assert "killed: killed: SIGTERM from the scheduler (cancel, requeue" in done.stdout
    assert "signalled: True" in done.stdout


def simulated_pair(rng, factor: float, node_sigma: float, anchors: int):
    """One comparison across two nodes as a cluster makes it: every node shifts every
    configuration's level by its own offset (σ node_sigma), every run by drift (2%), every
    process by 1%. `anchors` configurations were measured on both nodes."""
    offsets = {n: rng.normal(0, node_sigma) for n in ("n1", "n2")}

    def run(key: str, node: str, level: float) -> Measured:
        center = level + offsets[node] + rng.normal(0, 0.02)
        return Measured(key, node, list(np.exp(center + rng.normal(0, 0.01, 3))))

    levels = rng.normal(0, 1, anchors)
    sweep = [run(f"anchor{k}", n, levels[k]) for k in range(anchors) for n in ("n1", "n2")]
    base, cand = run("a", "n1", 0.0), run("b", "n2", -math.log(factor))
    return base, cand, sweep


@pytest.mark.parametrize("node_sigma", [0.02, 0.15])
def test_across_nodes_an_a_a_trips_at_most_alpha_and_a_planted_speedup_is_found(node_sigma):
    """Simulated clusters (nodes 2% or 15% apart): over 400 A/A comparisons across nodes
    at most α + a margin are called different, and a 1.5× speedup is found in most when
    the nodes differ little."""
    rng = np.random.default_rng(7)
    tripped = found = 0
    for _ in range(400):
        base, cand, sweep = simulated_pair(rng, 1.0, node_sigma, anchors=4)
        d = nodes.across(base, cand, "fwd", nodes.spread([sweep], "fwd"))
        tripped += significance.decide([d])[0].real
        base, cand, sweep = simulated_pair(rng, 1.5, node_sigma, anchors=4)
        d = nodes.across(base, cand, "fwd", nodes.spread([sweep], "fwd"))
        found += significance.decide([d])[0].real
    assert tripped / 400 <= significance.ALPHA + 0.02
    if node_sigma < 0.05:
        assert found / 400 >= 0.8


@pytest.mark.parametrize("field, value", [("windows_per_task", 0), ("array_parallelism", -1),
                                          ("timeout_min", 0)])
def test_a_launcher_count_below_one_is_refused_before_anything_runs(field, value):
    from rnnexp.app import config_check
    from rnnexp.errors import ConfigError

    cfg = compose_cfg(["hydra/launcher=rnnexp_slurm", f"hydra.launcher.{field}={value}"])
    assert cfg.hydra.launcher._target_.endswith("RnnexpSlurmLauncher")
    with pytest.raises(ConfigError, match=f"hydra.launcher.{field}: must be ≥ 1"):
        config_check.check_run(cfg, multirun=True)


def test_a_task_that_ran_between_two_looks_is_known_to_have_started(tmp_path):
    jobs = [Submitted(f"17_{i}", Paths(tmp_path / f"{i}.pkl", tmp_path / f"{i}.err"))
            for i in range(2)]
    tasks = slurm.tasks_of(jobs, [[[0]], [[1]]])
    answers = iter([{0: slurm.TaskState("PENDING"), 1: slurm.TaskState("PENDING")},
                    {0: slurm.TaskState("CANCELLED", "node1"), 1: slurm.TaskState("CANCELLED")}])
    now = [0.0]
    slurm.wait(tasks, poll=lambda array: next(answers), sleep=lambda s: now.append(now.pop() + s),
               clock=lambda: now[0])
    assert [t.started for t in tasks] == [True, False]
    assert slurm.never_started(tasks) == [1]
