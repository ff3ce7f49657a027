"""Sweeps on a real SLURM cluster (two slurmd nodes on this machine, tests/slurm/cluster.py)
into a real tracking server: one job array whose tasks each measure interleaved windows on
one node, a node drained mid-sweep, a task requeued mid-window, the server restarted while
jobs record, and the whole array cancelled then resumed — nothing measured twice, nothing
lost, every MLflow run ending in a true state."""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict

import pytest

from rnnexp.app.commands import run_command
from tests.results.test_tracking import runs_of

pytestmark = pytest.mark.slow


def by_seed(children: list) -> dict[str, list[str]]:
    """seed → the statuses of its job runs, oldest first."""
    found = defaultdict(list)
    for run in sorted(children, key=lambda r: r.info.start_time):
        found[run.data.params.get("seed", "?")].append(run.info.status)
    return dict(found)


def result_id(sweep, job: int) -> str:
    data = (sweep.folder / str(job) / "results.json").read_bytes()
    return hashlib.sha256(data).hexdigest()[:20]


def wait_for(condition, what: str, sweep, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        sweep.alive(deadline, what)
        time.sleep(0.2)


def test_windows_go_to_one_node_each_through_an_array_with_a_node_drained(cluster, server,
                                                                         sweep, capsys):
    """Six jobs, three windows of two (seed × model: each window holds both models of a
    seed), three tasks, two at once. Both first tasks are held at their gates; the node of
    task 0 is drained, and task 0 allowed to finish: it ends normally there, and task 2 can
    only run on the other node, once task 1 frees it."""
    s = sweep("seed=0,1,2", "model=lstm,gru", "bench.window=2",
              "hydra.launcher.array_parallelism=2", f"sinks.mlflow.uri={server.uri}",
              "sinks.mlflow.experiment=drain")
    for seed in (0, 1):
        s.close_gate(seed)
    s.start()
    first, second = s.waiting(0), s.waiting(1)
    assert {first, second} == set(cluster.nodes)  # tasks 0 and 1 run side by side
    array = cluster.jobs()[0].split("_")[0]
    shown = cluster.run("scontrol", "-o", "show", "job", array).stdout
    assert "ArrayTaskThrottle=2" in shown  # submitted as an array with a parallelism limit
    cluster.set_node(first, "drain", "test: drained mid-sweep")
    s.open_gate(0)
    wait_for(lambda: (s.folder / "1" / "results.json").exists(), "task 0's jobs", s)
    s.open_gate(1)
    assert s.finish() == 0, s.err
    assert f"slurm: array {array}: 3 task(s) for 6 job(s), at most 2 at once" in s.err

    tasks = s.tasks()["tasks"]
    assert [t["jobs"] for t in tasks] == [[0, 1], [2, 3], [4, 5]]
    assert [t["state"] for t in tasks] == ["COMPLETED"] * 3
    assert [t["node"] for t in tasks] == [first, second, second]  # not on the drained node
    for task in tasks:
        results = [s.result(j) for j in task["jobs"]]
        assert {r["status"] for r in results} == {"ok"}
        # A window: both models of a seed, measured together on the task's node.
        assert {r["environment"]["scheduler"]["node"] for r in results} == {task["node"]}
        assert {r["config"]["seed"] for r in results} == {results[0]["config"]["seed"]}
        assert [r["interleaving"]["jobs"] for r in results] == [task["jobs"]] * 2
        assert {r["environment"]["scheduler"]["array_job_id"] for r in results} == {array}
        assert {r["config"]["bench"]["num_threads"] for r in results} == {1}  # cpus_per_task

    [parent], children = server.runs("drain")
    assert parent.info.status == "FINISHED" and parent.data.tags["jobs"] == "6"
    assert sorted(c.info.status for c in children) == ["FINISHED"] * 6
    assert sorted((c.data.params["seed"], c.data.tags["node"]) for c in children) == sorted(
        (str(seed), node) for seed, node in ((0, first), (1, second), (2, second))
        for _ in range(2))

    # Compared against seed 0, seeds 1 and 2 ran on the other node: compare says so, and
    # with no configuration measured on two nodes it cannot tell them apart.
    store = ["--tracking-uri", server.uri, "--experiment", "drain"]
    assert run_command("compare", [*store, "--baseline", "seed=0", "--output",
                                   str(s.folder / "seeds.png")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "crossed nodes: 4 pair(s) measured on different nodes" in out
    assert f"({first} → {second})" in out and "cannot be told apart" in out
    # Within a window (one model against the other, one seed) the pairs never cross.
    assert run_command("compare", [*store, "--baseline", "model=lstm", "--output",
                                   str(s.folder / "models.png")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "crossed nodes" not in out and "cells judged: 6 paired by round" in out


def test_a_requeued_task_keeps_what_it_measured_and_a_restarted_server_misses_nothing(
        cluster, server, sweep):
    """Four windows of one job, two a task. Task 0 is requeued (scontrol requeue) while its
    second window measures: job 0 is kept, job 1 is recorded killed, then measured again.
    The tracking server is down while job 1 records: the launcher uploads it once the server
    is back."""
    s = sweep("seed=0,1,2,3", "bench.window=1", "hydra.launcher.windows_per_task=2",
              "hydra.launcher.array_parallelism=2", f"sinks.mlflow.uri={server.uri}",
              "sinks.mlflow.experiment=requeue")
    for seed in (1, 3):
        s.close_gate(seed)
    s.start()
    s.waiting(1)
    s.waiting(3)
    job0 = (s.folder / "0" / "results.json").read_bytes()
    array = cluster.jobs()[0].split("_")[0]
    task0 = f"{array}_0"
    cluster.run("scontrol", "requeue", task0)
    # SLURM holds a requeued job back for two minutes; the test lets it start at once.
    wait_for(lambda: "PENDING" in cluster.run("squeue", "-h", "-o", "%T", "-j", task0,
                                              check=False).stdout, "the requeue", s)
    cluster.run("scontrol", "update", f"jobid={task0}", "starttime=now")
    s.waiting(1, restarts=1)
    server.stop()
    try:
        s.open_gate(1)
        wait_for(lambda: (s.folder / "1" / "results.json").exists()
                 and s.result(1)["status"] == "ok", "job 1 recorded", s)
    finally:
        server.start()
    s.open_gate(3)  # task 1 ends, and with it the sweep, once the server is back
    assert s.finish() == 0, s.err
    assert "1 job(s) could not record there (jobs 1)" in " ".join(s.err.split()), s.err
    assert "MLflow store" in (s.folder / ".submitit" / task0 / f"{task0}_0_log.err"
                              ).read_text()  # job 1's warning: the server was down

    assert (s.folder / "0" / "results.json").read_bytes() == job0  # not measured again
    assert "job(s) 0 measured before the requeue: kept" in \
        (s.folder / ".submitit" / task0 / f"{task0}_0_log.err").read_text()
    tasks = s.tasks()["tasks"]
    assert [(t["jobs"], t["windows"], t["restarts"]) for t in tasks] == \
        [([0, 1], [[0], [1]], 1), ([2, 3], [[2], [3]], 0)]
    assert s.result(1)["environment"]["scheduler"]["restarts"] == "1"
    assert [s.result(j)["status"] for j in range(4)] == ["ok"] * 4

    [parent], children = server.runs("requeue")
    assert parent.info.status == "FINISHED" and parent.data.tags["jobs_ok"] == "4"
    # The killed attempt is a run of its own (KILLED); every measurement is there once.
    assert by_seed(children) == {"0": ["FINISHED"], "1": ["KILLED", "FINISHED"],
                                 "2": ["FINISHED"], "3": ["FINISHED"]}
    finished = [c.data.tags["rnnexp.result_id"] for c in children
                if c.info.status == "FINISHED"]
    assert sorted(finished) == sorted(result_id(s, j) for j in range(4))


def test_scancel_of_the_array_ends_the_sweep_killed_and_resume_measures_the_rest(
        cluster, sweep, tmp_path):
    """Three tasks of one job, one at a time; while task 1 measures, the whole array is
    cancelled: task 2 never starts."""
    store = f"sqlite:///{tmp_path}/mlflow.db"
    s = sweep("seed=0,1,2", "bench.window=1", f"sinks.mlflow.uri={store}")
    s.close_gate(1)
    s.start("hydra.launcher.array_parallelism=1")
    s.waiting(1)
    array = cluster.jobs()[0].split("_")[0]
    cluster.run("scancel", array)
    assert s.finish() == 143, s.err  # ended by the scheduler's SIGTERM
    assert f"SLURM array {array} cancelled" in s.err and "job(s) 2 never started" in s.err
    assert [s.result(j)["status"] for j in range(2)] == ["ok", "interrupted"]
    assert "SIGTERM from the scheduler" in s.result(1)["reason"]
    assert not (s.folder / "2" / "results.json").exists()
    before = (s.folder / "0" / "results.json").read_bytes()
    _, [parent], children = runs_of(store)
    assert parent.info.status == "KILLED" and "cancelled" in parent.data.tags["reason"]
    assert by_seed(children) == {"0": ["FINISHED"], "1": ["KILLED"]}

    s.open_gate(1)
    # The same command, resumed; two tasks at once now (how the array runs is not part of
    # what a job measures).
    assert s.start("resume=true", "hydra.launcher.array_parallelism=2").finish() == 0, s.err
    assert "resume: 1 of 3 jobs already measured" in " ".join(s.err.split())
    assert (s.folder / "0" / "results.json").read_bytes() == before  # not measured again
    assert [s.result(j)["status"] for j in range(3)] == ["ok"] * 3
    _, [again], children = runs_of(store)
    assert again.info.run_id == parent.info.run_id
    assert again.info.status == "FINISHED" and "reason" not in again.data.tags
    assert by_seed(children) == {"0": ["FINISHED"], "1": ["KILLED", "FINISHED"],
                                 "2": ["FINISHED"]}


def test_a_launch_the_controller_refuses_is_one_line_and_closes_its_parent(sweep, tmp_path):
    store = f"sqlite:///{tmp_path}/mlflow.db"
    s = sweep("seed=0,1", "hydra.launcher.partition=nosuch", f"sinks.mlflow.uri={store}")
    assert s.start().finish() == 2
    lines = [ln for ln in s.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "sbatch refused the sweep's array" in lines[0], s.err
    assert "partition" in lines[0].lower()
    _, [parent], children = runs_of(store)
    assert parent.info.status == "FAILED" and "sbatch refused" in parent.data.tags["reason"]
    assert not children
