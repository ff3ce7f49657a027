"""Hydra's own `${hydra:…}` resolver in the app's fields, as a Hydra app allows it: in a
single run and in every job of a sweep, with what Hydra knows of the job (its folder, its
number), checked with the rest before anything runs. Real processes, a real MLflow store."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT, TINY, load_results

pytestmark = pytest.mark.slow


def run(*args: str, tmp) -> subprocess.Popen:
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db"}
    return subprocess.Popen([sys.executable, "-m", "rnnexp", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_hydra_resolvers_in_the_apps_fields_resolve_as_in_the_job(tmp_path):
    single = run(*TINY, "sinks.mlflow.experiment=at ${hydra:runtime.cwd}",
                 f"hydra.run.dir={tmp_path}/run", tmp=tmp_path)
    sweep = run("-m", "seed=0,1", *TINY,
                "sinks.mlflow.experiment=job ${hydra:job.num} in ${hydra:runtime.output_dir}",
                f"hydra.sweep.dir={tmp_path}/sweep", tmp=tmp_path)
    for proc in (single, sweep):
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err
        assert "HydraConfig" not in err and "error" not in err
    expected = {tmp_path / "run": f"at {ROOT}",
                tmp_path / "sweep" / "0": f"job 0 in {tmp_path / 'sweep' / '0'}",
                tmp_path / "sweep" / "1": f"job 1 in {tmp_path / 'sweep' / '1'}"}
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    for folder, experiment in expected.items():
        assert load_results(folder)["config"]["sinks"]["mlflow"]["experiment"] == experiment
        exp = client.get_experiment_by_name(experiment)
        assert exp is not None and client.search_runs([exp.experiment_id])
