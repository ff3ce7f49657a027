"""The SLURM tests' machinery: a real cluster (tests/slurm/cluster.py) for the session, a real
tracking server the tests can stop and start again, sweeps started against both, and gates
that hold a job mid-measurement (tests/slurm/gate.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT, SERVER_ENV, TINY, free_port, kill_tree
from tests.slurm import cluster as slurm_cluster
from tests.slurm.gate import GATES_ENV


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """The cluster, installed and started by the project's script; the tests skip with its
    one-line reason where this machine cannot install or start SLURM."""
    home = tmp_path_factory.mktemp("slurm", numbered=True)
    try:
        started = slurm_cluster.up(home)
    except slurm_cluster.Unavailable as err:
        slurm_cluster.down(home)
        pytest.skip(f"no SLURM cluster here: {err}")
    try:
        yield started
    finally:
        slurm_cluster.down(home)


class TrackingServer:
    """A real `mlflow server` (SQLite store, served artifacts) on one port, which a test may
    stop and start again over the same store, as an operator restarts one."""

    def __init__(self, folder: Path):
        self.folder, self.port = folder, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1",
             "--backend-store-uri", f"sqlite:///{self.folder / 'server.db'}",
             "--artifacts-destination", str(self.folder / "server-artifacts")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.folder,
            env={**os.environ, **SERVER_ENV})
        deadline = time.monotonic() + 180
        while True:  # serving, not only listening
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=30) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            assert self.proc.poll() is None, "mlflow server exited"
            assert time.monotonic() < deadline, "mlflow server did not start in 180 s"
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc is None:
            return
        kill_tree(self.proc)  # its gunicorn/uvicorn workers too
        self.proc.wait(timeout=30)
        self.proc = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the port is free again before a restart
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    time.sleep(0.2)
            except OSError:
                return

    def runs(self, experiment: str) -> tuple[list, list]:
        """(parent runs, job runs) of an experiment."""
        client = MlflowClient(self.uri)
        exp = client.get_experiment_by_name(experiment)
        found = client.search_runs([exp.experiment_id]) if exp else []
        return ([r for r in found if r.data.tags.get("rnnexp.kind") == "sweep"],
                [r for r in found if r.data.tags.get("rnnexp.kind") == "job"])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One tracking server for a test module; each test records to an experiment of its
    own."""
    running = TrackingServer(tmp_path_factory.mktemp("mlflow-server"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


@dataclass
class Sweep:
    """`python -m rnnexp -m ... hydra/launcher=rnnexp_slurm` on the cluster, in a folder of its
    own, with gates for its seeds."""

    cluster: slurm_cluster.Cluster
    folder: Path
    args: list[str]
    proc: Optional[subprocess.Popen] = None
    out: str = ""
    err: str = ""
    started: float = field(default_factory=time.time)

    @property
    def gates(self) -> Path:
        return self.folder.parent / f"{self.folder.name}-gates"

    def close_gate(self, seed: int) -> None:
        self.gates.mkdir(parents=True, exist_ok=True)
        (self.gates / str(seed)).touch()

    def open_gate(self, seed: int) -> None:
        (self.gates / str(seed)).unlink()

    def waiting(self, seed: int, restarts: int = 0, timeout: float = 240) -> str:
        """Until a job of `seed` waits at its gate in attempt `restarts` of its task; the
        node it waits on."""
        path = self.gates / f"{seed}.waiting"
        deadline = time.monotonic() + timeout
        while True:
            if path.exists():
                fields = path.read_text().split()
                if len(fields) == 3 and int(fields[1]) == restarts:
                    return fields[2]
            self.alive(deadline, f"job of seed {seed} at its gate (attempt {restarts})")
            time.sleep(0.2)

    def alive(self, deadline: float, what: str) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            out, err = self.proc.communicate()
            raise AssertionError(f"the sweep ended before {what}:\n{err[-3000:]}")
        if time.monotonic() > deadline:
            self.kill()
            raise AssertionError(f"waited too long for {what}")

    def start(self, *extra: str) -> Sweep:
        self.gates.mkdir(parents=True, exist_ok=True)
        env = {**self.cluster.env, "PYTHONWARNINGS": "ignore", "RNNEXP_TARGETS": "tests",
               GATES_ENV: str(self.gates)}
        # One GPU a task (the launcher's default) where the nodes have fake ones.
        gpus = [] if self.cluster.has_gpus else ["hydra.launcher.gpus_per_task=null"]
        command = [sys.executable, "-m", "rnnexp", "-m", "hydra/launcher=rnnexp_slurm",
                   "hydra.launcher.cpus_per_task=1", "model.build._target_=tests.slurm.gate.lstm",
                   *gpus, *TINY, *self.args, *extra, f"hydra.sweep.dir={self.folder}"]
        self.started = time.time()
        self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        return self

    def finish(self, timeout: float = 420) -> int:
        assert self.proc is not None
        try:
            self.out, self.err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None:
            kill_tree(self.proc)
        self.cluster.cancel_all()

    def result(self, job: int) -> dict:
        return json.loads((self.folder / str(job) / "results.json").read_text())

    def tasks(self) -> dict:
        return json.loads((self.folder / "slurm.json").read_text())


@pytest.fixture
def sweep(cluster, tmp_path):
    """A sweep to start (`sweep(*args)`); whatever it left on the cluster is cancelled."""
    made: list[Sweep] = []

    def _make(*args: str) -> Sweep:
        made.append(Sweep(cluster, tmp_path / f"sweep{len(made)}", list(args)))
        return made[-1]

    yield _make
    for s in made:
        if s.proc is not None and s.proc.poll() is None:
            s.kill()
    cluster.cancel_all()
    for node in cluster.nodes:  # a test that drained a node leaves it in service
        if cluster.node_states().get(node, "").startswith("drain"):
            cluster.set_node(node, "resume")

