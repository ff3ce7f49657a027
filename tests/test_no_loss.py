"""Nothing measured is lost: a signal after the table, an output folder that cannot be
written, two runs started together, a sweep folder moved or copied, a launcher interrupted,
a launch that fails. Real processes, real MLflow stores, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from rnnexp import exit_codes
from tests.conftest import ROOT, TINY, kill_tree, load_results
from tests.test_tracking import runs_of


def env_for(tmp: Path, **extra: str) -> dict:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1",
            "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db", **extra}


def start(*args: str, tmp: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rnnexp", *args], cwd=ROOT,
                            env=env_for(tmp, **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        kill_tree(proc)
        raise
    return proc.returncode, out, err


def test_a_signal_after_the_table_keeps_the_finished_result(tmp_path):
    """SIGTERM once the table is printed, while the result goes to a fresh MLflow store (its
    schema takes seconds to make): the result stays as measured, on disk and in MLflow."""
    proc = start(*TINY, f"hydra.run.dir={tmp_path}/run", tmp=tmp_path)
    try:
        for line in proc.stdout:  # the console sink's last line, before MLflow's turn
            if line.startswith("results: "):
                break
        assert proc.poll() is None, "the run ended before the signal"
        proc.send_signal(signal.SIGTERM)
    except BaseException:
        kill_tree(proc)
        raise
    code, out, err = finish(proc, 120)
    assert code == exit_codes.SIGTERM, err  # the signal came while the run was recording
    assert err.strip().splitlines()[-1:] == [
        "error: interrupted by SIGTERM — the run had ended and is recorded as it ended"]
    data = load_results(tmp_path / "run")
    assert data["status"] == "ok" and data["phases"]["forward"]["samples_ms"]
    _, _, [child] = runs_of(f"sqlite:///{tmp_path}/mlflow.db")
    assert child.info.status == "FINISHED" and child.data.tags["status"] == "ok"
