"""A password in the tracking URI reaches a real server behind basic authentication, from
every place a URI can come from — an override (plain, with '@', '/' and ':' in the password,
%-encoded), a sweep, a sweep under rnnexp_local, a config file, MLFLOW_TRACKING_URI, MLflow's
user and password variables, `sync --tracking-uri` — and is written and printed nowhere; nor
is a token in the URI a config file gives to a store that is down.

The server is MLflow's own (`mlflow server --app-name basic-auth`): a request without the
right Authorization header is answered 401, and the run is then not recorded. Every case
runs as a real `python -m rnnexp` process; they start together.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT, TINY, kill_tree, load_results, serving_mlflow

pytestmark = pytest.mark.slow

PASSWORD = "p@ss/w0rd:%x"  # '@', '/', ':' and '%' unencoded
TOKEN = "T0KEN"  # in the query of a URI to a store that is down
SECRETS = (PASSWORD.encode(), quote(PASSWORD, safe="").encode(), b"w0rd", TOKEN.encode())
AT_ONCE = 3  # cases run at once


def cases(host: str, tmp: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """case → (arguments, environment) of its `python -m rnnexp` process."""
    plain, encoded = f"http://admin:{PASSWORD}@{host}", \
        f"http://admin:{quote(PASSWORD, safe='')}@{host}"
    configs = tmp / "configs" / "experiment"
    configs.mkdir(parents=True)
    (configs / "store.yaml").write_text(
        f"# @package _global_\nsinks:\n  mlflow:\n    uri: '{plain}'\n")
    (configs / "down.yaml").write_text(
        f"# @package _global_\nsinks:\n  mlflow:\n    uri: http://127.0.0.1:9/?token={TOKEN}\n")
    run, sweep = ["hydra.run.dir={}/run"], ["-m", "seed=0,1", "hydra.sweep.dir={}/sweep"]
    # ('-m' goes first: Hydra's argument parser takes no option after the overrides.)
    return {
        "override": ([*run, f"sinks.mlflow.uri={plain}"], {}),
        "override-quoted": ([*run, f"sinks.mlflow.uri='{plain}'"], {}),
        "override-encoded": ([*run, f"sinks.mlflow.uri={encoded}"], {}),
        "sweep": ([*sweep, f"sinks.mlflow.uri={plain}"], {}),
        "rnnexp_local": ([*sweep, "hydra/launcher=rnnexp_local", f"sinks.mlflow.uri={plain}"],
                         {}),
        "config-file": ([*run, f"hydra.searchpath=[file://{tmp}/configs]",
                         "+experiment=store"], {}),
        "config-file-down": ([*run, f"hydra.searchpath=[file://{tmp}/configs]",
                              "+experiment=down"], {}),
        "MLFLOW_TRACKING_URI": (run, {"MLFLOW_TRACKING_URI": plain}),
        "MLFLOW_TRACKING_PASSWORD": ([*run, f"sinks.mlflow.uri=http://{host}"],
                                     {"MLFLOW_TRACKING_USERNAME": "admin",
                                      "MLFLOW_TRACKING_PASSWORD": PASSWORD}),
    }


def env_for(case_dir: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
    # Many requests at once to one server on a busy machine: MLflow's own timeout, longer
    # than rnnexp's fail-fast default (which gives way to it).
    return {**env, "PYTHONWARNINGS": "ignore", "MLFLOW_HTTP_REQUEST_TIMEOUT": "120",
            "MLFLOW_TRACKING_URI": f"sqlite:///{case_dir}/unused.db", **extra}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Every case run against one basic-auth server: {case: (folder, exit, stdout, stderr)},
    the runs of each on the server, the server's folder and its host:port."""
    tmp = tmp_path_factory.mktemp("credentials")
    with serving_mlflow(tmp, admin_password=PASSWORD) as server:
        with pytest.raises(urllib.error.HTTPError, match="401"):  # it does check
            urllib.request.urlopen(f"{server}/api/2.0/mlflow/experiments/search?"
                                   "max_results=1", timeout=30)
        host = server.split("//", 1)[1]
        out, todo = {}, list(cases(host, tmp).items())
        while todo:  # a few at a time: each imports torch and MLflow
            procs = {}
            for name, (args, env) in todo[:AT_ONCE]:
                folder = tmp / name
                folder.mkdir()
                args = [a.format(folder) for a in args]
                procs[name] = (folder, subprocess.Popen(
                    [sys.executable, "-m", "rnnexp", *args, *TINY,
                     f"sinks.mlflow.experiment={name}"], cwd=ROOT, env=env_for(folder, env),
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            todo = todo[AT_ONCE:]
            for name, (folder, proc) in procs.items():
                try:
                    stdout, stderr = proc.communicate(timeout=900)
                except BaseException:
                    for _, other in procs.values():
                        kill_tree(other)
                    raise
                out[name] = (folder, proc.returncode, stdout, stderr)
        # sync of a folder recorded offline, to the server named by --tracking-uri only.
        folder = tmp / "sync"
        subprocess.run([sys.executable, "-m", "rnnexp", *TINY, "sinks=[json]",
                        f"hydra.run.dir={folder}/run"], cwd=ROOT, env=env_for(folder, {}),
                       check=True, capture_output=True, timeout=900)
        sync = subprocess.run([sys.executable, "-m", "rnnexp", "sync", str(folder / "run"),
                               "--tracking-uri", f"http://admin:{PASSWORD}@{host}",
                               "--experiment", "sync"], cwd=ROOT, env=env_for(folder, {}),
                              capture_output=True, text=True, timeout=600)
        out["sync"] = (folder, sync.returncode, sync.stdout, sync.stderr)
        with pytest.MonkeyPatch.context() as patch:  # this process's own client looks
            patch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
            patch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
            client = MlflowClient(server)
            runs = {}
            for name in out:
                exp = client.get_experiment_by_name(name)
                runs[name] = client.search_runs([exp.experiment_id]) if exp else []
        yield out, runs, tmp, host


JOBS = {"sweep": 3, "rnnexp_local": 3}  # a sweep: its parent run and two jobs


@pytest.mark.parametrize("case", ["override", "override-quoted", "override-encoded", "sweep",
                                  "rnnexp_local", "config-file", "MLFLOW_TRACKING_URI",
                                  "MLFLOW_TRACKING_PASSWORD", "sync"])
def test_the_password_reaches_the_server_and_nothing_else(case, recorded):
    out, runs, _, _ = recorded
    folder, code, stdout, stderr = out[case]
    assert code == 0, stderr
    assert "not reachable" not in stderr, stderr
    assert len(runs[case]) == JOBS.get(case, 1), stderr
    assert all(r.info.status == "FINISHED" for r in runs[case])
    for run in runs[case]:
        shown = " ".join([*run.data.params.values(), *run.data.tags.values()])
        assert "w0rd" not in shown and "p%40ss" not in shown
    printed = (stdout + stderr).encode()
    assert not [s for s in SECRETS if s in printed]
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert any(p.name == "results.json" for p in files)
    assert [str(p) for p in files if any(s in p.read_bytes() for s in SECRETS)] == []


def test_a_config_file_s_uri_is_recorded_hidden(recorded):
    out, _, _, host = recorded
    recorded_uri = load_results(out["config-file"][0] / "run")["config"]["sinks"]["mlflow"]
    assert recorded_uri["uri"] == f"http://***@{host}"


def test_a_token_to_a_store_that_is_down_is_written_nowhere(recorded):
    """A config file's URI with a token in its query, to a store that is down: the run keeps
    its results for sync, and the token is in no file and no line printed."""
    out, _, _, _ = recorded
    folder, code, stdout, stderr = out["config-file-down"]
    assert code == 0, stderr
    assert "not reachable" in stderr, stderr
    assert not [s for s in SECRETS if s in (stdout + stderr).encode()]
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert any(p.name == "results.json" for p in files)
    assert [str(p) for p in files if any(s in p.read_bytes() for s in SECRETS)] == []


def test_no_artifact_on_the_server_holds_the_password(recorded):
    _, _, tmp, _ = recorded
    files = [p for p in (tmp / "server-artifacts").rglob("*") if p.is_file()]
    assert any(p.name == "results.json" for p in files)
    assert [str(p) for p in files if any(s in p.read_bytes() for s in SECRETS)] == []
