"""SIGKILL of the launching process — what the OOM killer or a scheduler does, leaving it no
chance to clean up — at any phase of a measurement leaves no process of it running: the fork
server and its workers (rnnexp.measure.forkserver_tie), the job processes of joblib and
submitit's local executor (rnnexp.app.stopping), a worker under another interpreter.

A model that stops for good in the phase under test (tests.faulty_models.stalling) says so in
a file; then the launching process is killed, and every process below it must be gone
within a few seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import ROOT, TINY
from tests.faulty_models import STALLED_ENV
from tests.run.test_interleave import environment_like_this_one

pytestmark = pytest.mark.slow

GONE_WITHIN_S = 5.0
STALLING = ["model.build._target_=tests.faulty_models.stalling", "sinks=[json]"]
WORKERS = ["bench.processes=2"]  # a single run measured in worker processes
SWEEP = ["-m", "seed=0,1"]

# (phase the model stops in, arguments)
CASES = {
    "run, fork server starting": ("start", WORKERS),
    "run, set-up": ("build", WORKERS),
    "run, verification": ("verify", WORKERS),
    "run, timing": ("timing", [*WORKERS, "bench.verify=false"]),
    "sweep interleaved, timing": ("timing", [*SWEEP, "bench.verify=false"]),
    "sweep joblib, set-up": ("build", [*SWEEP, *WORKERS, "hydra/launcher=joblib",
                                       "hydra.launcher.n_jobs=2"]),
    "sweep rnnexp_local, verification": ("verify", [*SWEEP, *WORKERS,
                                                    "hydra/launcher=rnnexp_local"]),
    "run, another interpreter, set-up": ("build", ["bench.python={other}"]),
}


def alive(procs: list[psutil.Process]) -> list[str]:
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{proc.pid} {' '.join(proc.cmdline())[:100]}")
        except psutil.NoSuchProcess:
            continue
    return out


def fork_server_started(launcher: psutil.Process) -> bool:
    return any("forkserver" in " ".join(p.cmdline()) for p in launcher.children())


@pytest.mark.parametrize("case", list(CASES))
def test_sigkill_of_the_launcher_leaves_nothing_running(case, tmp_path):
    phase, args = CASES[case]
    if "{other}" in " ".join(args):
        other = environment_like_this_one(tmp_path / "other")
        args = [a.format(other=other) for a in args]
    stalled = tmp_path / "stalled"
    folder = f"hydra.sweep.dir={tmp_path}/out" if "-m" in args else \
        f"hydra.run.dir={tmp_path}/out"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "RNNEXP_TARGETS": "tests",
           STALLED_ENV: str(stalled), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/m.db"}
    phase_arg = "build" if phase == "start" else phase
    proc = subprocess.Popen([sys.executable, "-m", "rnnexp", *args, *TINY, *STALLING,
                             f"+model.build.phase={phase_arg}", folder], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    launcher = psutil.Process(proc.pid)
    family: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 600
        while not (fork_server_started(launcher) if phase == "start" else stalled.exists()):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, f"never reached {phase}"
            time.sleep(0.1)
        time.sleep(0.5)  # well inside the phase
        family = launcher.children(recursive=True)
        assert family
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)  # reaped, as a shell or scheduler would
        killed = time.monotonic()
        while alive(family) and time.monotonic() < killed + GONE_WITHIN_S:
            time.sleep(0.2)
        assert alive(family) == [], f"still running {GONE_WITHIN_S:g} s after the SIGKILL"
    finally:
        for rest in [launcher, *family]:
            try:
                rest.kill()
            except psutil.NoSuchProcess:
                pass
