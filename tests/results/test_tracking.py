"""MLflow tracking end to end: real Hydra sweeps, real MLflow stores, no mocks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rnnexp.app.commands import run_command
from rnnexp.app.config_check import check
from rnnexp.config.schema import PROJECT_TRACKING_URI
from rnnexp.errors import ConfigError
from rnnexp.results.result import CRASHED, INTERRUPTED, RESULTS_FILE, Result
from rnnexp.results.sinks import Sweep
from rnnexp.results.sinks import mlflow as mlflow_sink
from rnnexp.results.sinks.mlflow import Mlflow, runs, store, view
from tests.conftest import ROOT, TINY, free_port, load_results, path_without_slurm, rnnexp_here

SWEEP = ["model=lstm,py", "backend=aten,cudnn", *TINY]  # 2 run, 2 declined (no CUDA here)


def rnnexp(*args: str, command: str = "", timeout: float = 300, cwd: Path = ROOT,
           path: str = "") -> subprocess.CompletedProcess:
    """`python -m rnnexp [COMMAND] ARGS` as a user runs it (with `path` as PATH if given)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", **({"PATH": path} if path else {})}
    env.pop("MLFLOW_TRACKING_URI", None)  # every call here names its store
    return subprocess.run([sys.executable, "-m", "rnnexp", *filter(None, [command]), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def call(command: str, *args: str, capsys) -> tuple[int, str, str]:
    """`rnnexp compare|sync ARGS` in this process (same code, no interpreter start)."""
    rc = run_command(command, args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def sqlite(path: Path) -> str:
    return f"sqlite:///{path}"


def runs_of(uri: str) -> tuple[MlflowClient, list, list]:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rnnexp")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("rnnexp.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("rnnexp.kind") == "job"]
    return client, parents, children


def artifacts(client: MlflowClient, run_id: str, path: str = "") -> set[str]:
    out = set()
    for item in client.list_artifacts(run_id, path or None):
        out |= artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return out


@pytest.fixture(scope="module")
def recorded_sweep(tmp_path_factory):
    """One 4-job sweep (basic launcher) recorded in a fresh store, shared by several tests."""
    tmp = tmp_path_factory.mktemp("sweep")
    root_db = ROOT / "mlflow.db"
    before = root_db.stat().st_mtime if root_db.exists() else None
    proc = rnnexp_here("-m", *SWEEP, f"sinks.mlflow.uri={sqlite(tmp / 'mlflow.db')}",
                       f"hydra.sweep.dir={tmp}/sweep", store=sqlite(tmp / "unused.db"))
    assert proc.returncode == 0, proc.stderr
    after = root_db.stat().st_mtime if root_db.exists() else None
    assert before == after, "a test wrote to the project's mlflow.db"
    return tmp, proc


def test_sweep_is_one_parent_with_a_child_per_job(recorded_sweep):
    tmp, proc = recorded_sweep
    assert "rnnexp sweep: 4 jobs" in proc.stdout  # the summary table at the end
    client, parents, children = runs_of(sqlite(tmp / "mlflow.db"))
    assert len(parents) == 1 and len(children) == 4
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert {"summary/summary.json", "summary/summary.csv", "summary/summary.md",
            "summary/fwd_bwd.png"} <= artifacts(client, parent.info.run_id)
    assert parent.data.tags["jobs"] == "4" and parent.data.tags["jobs_ok"] == "2"
    # The parent: named by what it sweeps, its overrides as params, its counts as metrics.
    assert parent.info.run_name.startswith("model=lstm,py backend=aten,cudnn · ")
    assert parent.data.params["model"] == "lstm,py" and parent.data.params["shape"] == "small"
    assert parent.data.metrics == {"jobs": 4, "jobs_ok": 2, "jobs_declined": 2,
                                   "jobs_failed": 0}

    by_name = {c.info.run_name: c for c in children}
    assert set(by_name) == {"lstm·aten·small·cpu", "py·aten·small·cpu",
                            "lstm·cudnn·small·auto (declined)", "py·cudnn·small·auto (declined)"}
    ok = by_name["lstm·aten·small·cpu"]
    assert ok.info.status == "FINISHED"
    p, m, t = ok.data.params, ok.data.metrics, ok.data.tags
    assert (p["model"], p["backend"], p["shape"], p["bench"]) == ("lstm", "aten", "small", "quick")
    assert p["shape.hidden_size"] == "32" and p["bench.iters"] == "3" and p["dtype"] == "float32"
    # Params a person filters on: no wiring, no zero DeepBench fields of a non-DeepBench run.
    assert not [k for k in p if k.endswith("_target_") or k.startswith(("deepbench.", "sinks."))]
    # The key metrics unsectioned (MLflow's chart view opens on them), the rest in sections.
    key = {k for k in m if "/" not in k}
    assert key == {"fwd_median_ms", "bwd_median_ms", "total_median_ms", "tokens_per_s",
                   "gflops", "gbps", "pct_peak_flops", "pct_peak_bandwidth"}
    for prefix in ("fwd", "bwd", "total"):
        for stat in ("median_ms", "iqr_ms", "mean_ms", "std_ms", "min_ms", "max_ms", "p10_ms",
                     "p90_ms", "cv", "n", "tokens_per_s", "gflops", "gbps"):
            assert f"{prefix}/{stat}" in m, f"{prefix}/{stat}"
    assert m["fwd/n"] == 3 and m["verify/max_abs_error"] < 1e-3
    # Key metrics rounded for reading (four digits); their sections keep every digit.
    assert m["tokens_per_s"] == runs.rounded(m["total/tokens_per_s"])
    assert m["fwd_median_ms"] == float(f"{m['fwd/median_ms']:.4g}")
    assert t["sweep"] == parent.info.run_name  # shown beside each job in the saved view
    fwd = client.get_metric_history(ok.info.run_id, "samples/fwd_ms")
    assert sorted(x.step for x in fwd) == [0, 1, 2]
    assert len(client.get_metric_history(ok.info.run_id, "samples/bwd_ms")) == 3
    assert t["status"] == "ok" and t["verification"] == "passed" and t["torch"]
    assert t["device"] == "cpu" and t["cpu_name"] and t["host"] and t["backend_resolved"] == "aten"
    assert "model=lstm" in t["overrides"] and "git_commit" in t
    assert {".hydra/config.yaml", ".hydra/overrides.yaml", "results.json",
            "config/resolved.yaml"} <= artifacts(client, ok.info.run_id)

    declined = by_name["py·cudnn·small·auto (declined)"]
    assert declined.info.status == "FINISHED"  # not a red FAILED run, as a crash is
    assert declined.data.tags["status"] == "unsupported"
    assert "needs a CUDA build" in declined.data.tags["reason"]


def test_each_job_of_a_sweep_runs_its_own_composition(recorded_sweep):
    """The launcher reuses the compositions the config check made (rnnexp.config.compositions):
    every job's .hydra files still say its own choices and overrides."""
    from omegaconf import OmegaConf

    tmp, _ = recorded_sweep
    seen = set()
    for job in sorted((tmp / "sweep").glob("[0-9]*")):
        hydra = OmegaConf.load(job / ".hydra" / "hydra.yaml").hydra
        config = OmegaConf.load(job / ".hydra" / "config.yaml")
        overrides = OmegaConf.to_container(OmegaConf.load(job / ".hydra" / "overrides.yaml"))
        model, backend = hydra.runtime.choices.model, hydra.runtime.choices.backend
        assert overrides[:4] == [f"model={model}", f"backend={backend}", *TINY]
        assert overrides[4].startswith("sinks.mlflow.uri=") and len(overrides) == 5
        assert list(hydra.overrides.task) == overrides
        assert list(hydra.overrides.hydra) == [f"hydra.sweep.dir={tmp}/sweep",
                                               "hydra.mode=MULTIRUN"]
        assert hydra.job.num == int(job.name) and hydra.job.name == "rnnexp"
        assert hydra.job.override_dirname == ",".join(sorted(overrides))
        assert config.model.form == {"lstm": "module", "py": "eager"}[model]
        assert config.bench.iters == 3
        seen.add((model, backend))
    assert seen == {(m, b) for m in ("lstm", "py") for b in ("aten", "cudnn")}


def test_compare_speedups_table_and_chart(recorded_sweep, tmp_path, capsys):
    tmp, _ = recorded_sweep
    uri = sqlite(tmp / "mlflow.db")
    png = tmp_path / "chart.png"
    proc = rnnexp("--baseline", "model=lstm", "--tracking-uri", uri, "--output", str(png),
                  command="compare")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "fwd speedup" in out and "bwd speedup" in out and "base" in out
    assert "unsupported" in out and png.stat().st_size > 1000
    assert png.read_bytes()[:4] == b"\x89PNG"
    client, parents, _ = runs_of(uri)
    assert "compare/chart.png" in artifacts(client, parents[0].info.run_id)

    rc, _, err = call("compare", "--baseline", "model=gru", "--tracking-uri", uri,
                      capsys=capsys)
    assert rc == 2
    assert err.strip() == "error: --baseline model=gru: matches no timed run of this " \
                          "sweep — model was lstm, py"
    rc, _, err = call("compare", "--baseline", "color=red", "--tracking-uri", uri,
                      capsys=capsys)
    assert rc == 2 and "not a config field of this sweep" in err
    rc, _, err = call("compare", "no-such-sweep", "--tracking-uri", uri, capsys=capsys)
    assert rc == 2 and "sweep 'no-such-sweep': no parent run" in err
    rc, _, err = call("compare", "--tracking-uri", sqlite(tmp_path / "none.db"),
                      capsys=capsys)
    assert rc == 2 and err.strip() == f"error: no MLflow store at {tmp_path / 'none.db'} — " \
                                      "check --tracking-uri"


def test_compare_without_sweep_is_one_line(tmp_path, capsys):
    uri = sqlite(tmp_path / "mlflow.db")
    store.connect(uri, "rnnexp")  # a store and experiment, but no sweep
    rc, _, err = call("compare", "--tracking-uri", uri, capsys=capsys)
    assert rc == 2
    assert err.strip().startswith("error: no sweep recorded in this experiment")


@pytest.mark.slow
def test_parallel_sweep_on_a_fresh_store_loses_nothing(run_cli, tmp_path):
    proc = run_cli(*SWEEP, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", multirun=True)
    assert proc.returncode == 0, proc.stderr
    client, parents, children = runs_of(sqlite(tmp_path / "mlflow.db"))
    assert len(parents) == 1 and len(children) == 4
    assert [c.info.status for c in children] == ["FINISHED"] * 4  # 2 ok, 2 declined
    assert all(c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for c in children)
    assert all(c.data.tags.get("rnnexp.result_id") for c in children)
    assert parents[0].info.status == "FINISHED"


@pytest.mark.slow
def test_unreachable_store_keeps_results_and_sync_uploads_them_once(run_here, tmp_path,
                                                                   capsys):
    t0 = time.monotonic()
    proc = run_here(*TINY, f"sinks.mlflow.uri=http://127.0.0.1:{free_port()}")
    assert time.monotonic() - t0 < 60  # no retry hang
    assert proc.returncode == 0, proc.stderr
    assert load_results(tmp_path / "run")["status"] == "ok"
    warnings = [ln for ln in proc.stderr.splitlines() if "not reachable" in ln]
    assert len(warnings) == 1 and "python -m rnnexp sync" in warnings[0]

    uri = sqlite(tmp_path / "later.db")
    up = rnnexp(str(tmp_path / "run"), "--tracking-uri", uri, command="sync")
    assert up.returncode == 0, up.stderr
    assert "1 uploaded, 0 already recorded" in up.stdout
    rc, out, _ = call("sync", str(tmp_path / "run"), "--tracking-uri", uri, capsys=capsys)
    assert rc == 0 and "0 uploaded, 1 already recorded" in out
    _, parents, children = runs_of(uri)
    assert not parents and len(children) == 1 and children[0].info.status == "FINISHED"
    assert children[0].data.metrics["fwd/n"] == 3


@pytest.mark.slow
def test_offline_sweep_syncs_as_parent_and_children(run_here, tmp_path, capsys):
    proc = run_here("model=lstm,py", *TINY, f"sinks.mlflow.uri=http://127.0.0.1:{free_port()}",
                    multirun=True)
    assert proc.returncode == 0, proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if "not reachable" in ln]) == 1
    uri = sqlite(tmp_path / "later.db")
    for expected in ("2 uploaded, 0 already recorded", "0 uploaded, 2 already recorded"):
        rc, out, err = call("sync", str(tmp_path / "sweep"), "--tracking-uri", uri,
                            capsys=capsys)
        assert rc == 0, err
        assert expected in out
    client, parents, children = runs_of(uri)
    assert len(parents) == 1 and len(children) == 2
    assert parents[0].info.status == "FINISHED"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}


def test_sync_bad_folder_is_one_line(tmp_path, capsys):
    rc, _, err = call("sync", str(tmp_path / "nope"), capsys=capsys)
    assert rc == 2
    assert err.strip().splitlines() == [
        f"error: {tmp_path / 'nope'}: no such file or folder — give a results.json, a run "
        "folder or a sweep folder (outputs/runs/…, outputs/sweeps/…)"]


def test_relative_sqlite_uri_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        check(["sinks.mlflow.uri=sqlite:///mlflow.db"], multirun=False)
    assert str(err.value) == ("sinks.mlflow.uri: 'sqlite:///mlflow.db' is not an absolute "
                              "SQLite path — use sqlite:////abs/path/mlflow.db")
    assert PROJECT_TRACKING_URI == f"sqlite:///{ROOT / 'mlflow.db'}"


@pytest.mark.slow
def test_runs_reach_a_real_mlflow_server(run_here, mlflow_server):
    proc = run_here(*TINY, f"sinks.mlflow.uri={mlflow_server}")
    assert proc.returncode == 0, proc.stderr
    assert "not reachable" not in proc.stderr
    client, _, children = runs_of(mlflow_server)
    assert len(children) == 1 and children[0].info.status == "FINISHED"
    assert "results.json" in artifacts(client, children[0].info.run_id)


@pytest.mark.slow
def test_without_mlflow_records_nothing_and_prints_fastrnns_json(run_here, tmp_path):
    proc = run_here(*TINY, "sinks=[json,console,fastrnns]", store=False)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "mlflow.db").exists()
    assert (tmp_path / "run" / "results.json").exists()
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(data) == {"lstm", "lstm-backward"} and set(data["lstm"]) == {"aten"}


def test_crash_and_ctrl_c_become_failed_and_killed_runs(tmp_path):
    uri = sqlite(tmp_path / "mlflow.db")
    client, exp_id = store.connect(uri, "rnnexp")
    statuses = {}
    for status in (CRASHED, INTERRUPTED):
        folder = tmp_path / status
        folder.mkdir()
        result = Result(choices={"model": "lstm", "backend": "aten"}, overrides=[], config={},
                        status=status, reason="RuntimeError: boom")
        result.save(folder)
        run_id = runs.log_result(client, exp_id, result, folder)
        run = client.get_run(run_id)
        statuses[status] = (run.info.status, run.data.tags["reason"])
    assert statuses == {CRASHED: ("FAILED", "RuntimeError: boom"),
                        INTERRUPTED: ("KILLED", "RuntimeError: boom")}


def test_a_crashed_job_ends_its_sweep_parent_instead_of_leaving_it_running(tmp_path):
    uri = sqlite(tmp_path / "mlflow.db")
    sink = Mlflow(uri=uri)
    sink.name = "mlflow"
    sweep = Sweep.start(tmp_path, [])
    sink.on_sweep_start(sweep)
    run_id = sweep.state["mlflow"]["run_id"]
    client = MlflowClient(uri)
    assert client.get_run(run_id).info.status == "RUNNING"
    crashed = Result(choices={}, overrides=[], config={}, status=CRASHED,
                     reason="RuntimeError: boom")
    sink.on_abort(sweep, crashed)
    run = client.get_run(run_id)
    assert run.info.status == "FAILED" and run.data.tags["reason"] == "RuntimeError: boom"


@pytest.mark.skipif(shutil.which("srun") is not None, reason="a SLURM cluster would run it")
def test_a_failed_launch_ends_its_parent_run(tmp_path):
    """Submitit finds no SLURM here: the launch fails after the parent run was opened."""
    uri = sqlite(tmp_path / "mlflow.db")
    proc = rnnexp("-m", "model=lstm,py", *TINY, "hydra/launcher=rnnexp_slurm",
                  f"sinks.mlflow.uri={uri}", f"hydra.sweep.dir={tmp_path}/sweep",
                  path=path_without_slurm(tmp_path / "bin"))
    assert proc.returncode != 0
    _, parents, children = runs_of(uri)
    assert len(parents) == 1 and not children
    assert parents[0].info.status == "FAILED"
    assert "srun" in parents[0].data.tags["reason"]


def test_a_sweep_is_named_by_what_it_sweeps_before_its_date():
    from rnnexp.results.sinks import sweep_name

    assert sweep_name(["model=lstm,py", "shape=small"], "2026-11-24 10:00:00") == \
        "model=lstm,py · 2026-11-24 10:00:00"
    many = "+deepbench=" + ",".join(f"p{i}" for i in range(12))
    assert sweep_name([many, "bench=quick"], "D") == "+deepbench=p0,p1,p2,… (12) · D"
    assert sweep_name(["+experiment=deepbench", "sinks.mlflow.uri=x"], "D") == \
        "+experiment=deepbench · D"


def test_the_experiment_opens_on_its_runs_in_the_mlflow_ui(tmp_path):
    client, exp_id = store.connect(sqlite(tmp_path / "mlflow.db"), "rnnexp")
    assert client.get_experiment(exp_id).tags["mlflow.experimentKind"] == \
        "custom_model_development"


def view_of(client: MlflowClient, exp_id: str) -> tuple[dict, dict]:
    """The saved view's tag parsed, and the view state in it (as MLflow 3.17 reads it)."""
    value = json.loads(client.get_experiment(exp_id).tags[view.TAG])
    return value, json.loads(value["state"])


def test_a_sweep_leaves_a_saved_view_of_its_key_columns_and_prints_its_link(recorded_sweep):
    tmp, proc = recorded_sweep
    client, _, children = runs_of(sqlite(tmp / "mlflow.db"))
    exp_id = children[0].info.experiment_id
    links = [ln for ln in proc.stdout.splitlines() if ln.startswith("MLflow: ")]
    assert links == [f"MLflow: http://127.0.0.1:5000/#/experiments/{exp_id}/runs?"
                     f"viewStateShareKey=rnnexp  (mlflow ui --backend-store-uri "
                     f"{sqlite(tmp / 'mlflow.db')})"]  # once, at the end
    tag = client.get_experiment(exp_id).tags[view.TAG]
    assert len(tag) <= view.MAX_VALUE  # what a server of an older MLflow takes
    value, state = view_of(client, exp_id)
    assert value["name"] == "rnnexp: key metrics" and isinstance(value["createdAt"], int)
    # Every key metric a job has is a column, by MLflow's canonical key, in rnnexp's order.
    key = [k for k in runs.KEY_METRICS if k in children[0].data.metrics]
    assert {k for k in children[0].data.metrics if "/" not in k} == set(key)
    metric_columns = [c for c in state["selectedColumns"] if c.startswith("metrics.")]
    assert metric_columns == [f"metrics.`{k}`" for k in runs.KEY_METRICS]
    assert metric_columns[:2] == ["metrics.`fwd_median_ms`", "metrics.`bwd_median_ms`"]
    assert {"params.`model`", "params.`backend`", "params.`shape`", "params.`device`",
            "tags.`sweep`"} <= set(state["selectedColumns"])
    # The status and the machine's flags first: they fit the screen beside the run's name.
    assert state["selectedColumns"][:2] == ["tags.`status`", "tags.`env.flags`"]
    assert state["columnOrder"][3:] == state["selectedColumns"]
    # Jobs only, newest first: filtered and not sorted by start time, MLflow lists them flat
    # instead of folded under their sweep's parent.
    assert state["searchFilter"] == "tags.`rnnexp.kind` = 'job'"
    assert (state["orderByKey"], state["orderByAsc"]) == ("attributes.`end_time`", False)
    charts = [(c["type"], c.get("metricKey"), c["deleted"]) for c in state["compareRunCharts"]]
    assert charts[:3] == [("PARALLEL", None, False), ("BAR", "pct_peak_flops", False),
                          ("BAR", "pct_peak_bandwidth", False)]
    assert {m for _, m, deleted in charts if deleted} == \
        set(runs.KEY_METRICS) - {"pct_peak_flops", "pct_peak_bandwidth"}  # none across shapes
    assert state["compareRunCharts"][0]["selectedParams"][0] == "shape"
    # UIs before saved views read the same view from the top level (their own charts).
    assert value["selectedColumns"] == state["selectedColumns"]
    assert "compareRunCharts" not in value


def record_again(uri: str, folder: Path) -> None:
    """One more job recorded by a new process's sink (nothing of the last one remembered)."""
    mlflow_sink._VIEW_SAVED.clear()
    store.CONNECTIONS.clear()
    Mlflow(uri).on_job(Result.load(folder / RESULTS_FILE), folder, None)


def test_later_runs_leave_the_view_as_it_is_until_rnnexp_changes_it(recorded_sweep,
                                                                     tmp_path):
    tmp, _ = recorded_sweep
    folder = next(p.parent for p in (tmp / "sweep").rglob(RESULTS_FILE)
                  if json.loads(p.read_text())["status"] == "ok")
    uri = sqlite(tmp_path / "mlflow.db")
    record_again(uri, folder)
    client, exp_id = store.connect(uri, "rnnexp")
    first = client.get_experiment(exp_id).tags
    record_again(uri, folder)
    assert client.get_experiment(exp_id).tags == first  # not rewritten, nothing added
    assert len(runs_of(uri)[2]) == 2

    # A person saved their changes over it in the UI: kept.
    client.set_experiment_tag(exp_id, view.TAG, first[view.TAG].replace("key metrics", "mine"))
    record_again(uri, folder)
    assert view_of(client, exp_id)[0]["name"] == "rnnexp: mine"

    # rnnexp's view changed (an earlier version stored it): written anew, its age kept.
    client.set_experiment_tag(exp_id, view.FINGERPRINT_TAG, "an-earlier-view")
    record_again(uri, folder)
    value, state = view_of(client, exp_id)
    assert value["name"] == "rnnexp: key metrics" and state == view.state()
    assert value["createdAt"] == json.loads(first[view.TAG])["createdAt"] <= value["updatedAt"]
    assert client.get_experiment(exp_id).tags[view.FINGERPRINT_TAG] == view.fingerprint()
    assert len(runs_of(uri)[2]) == 4


def test_a_store_that_refuses_the_view_still_records_the_run(recorded_sweep, tmp_path,
                                                             capsys):
    import sqlite3

    tmp, _ = recorded_sweep
    folder = next((tmp / "sweep").rglob(RESULTS_FILE)).parent
    uri = sqlite(tmp_path / "mlflow.db")
    store.connect(uri, "rnnexp")  # the schema, then a database that refuses view tags
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        for event in ("INSERT", "UPDATE"):
            db.execute(f"CREATE TRIGGER refuse_{event.lower()} BEFORE {event} ON "
                       "experiment_tags WHEN NEW.key LIKE 'mlflow.sharedViewState.%' "
                       "BEGIN SELECT RAISE(ABORT, 'view tags refused here'); END")
    capsys.readouterr()
    record_again(uri, folder)
    out, err = capsys.readouterr()
    warnings = [ln for ln in err.splitlines() if ln.strip()]
    assert len(warnings) == 1 and warnings[0].startswith("warning: MLflow view 'rnnexp' not "
                                                         "saved (")
    assert "view tags refused here" in warnings[0] and "Traceback" not in err
    client, _, children = runs_of(uri)
    assert len(children) == 1 and children[0].info.status == "FINISHED"
    assert view.TAG not in client.get_experiment(children[0].info.experiment_id).tags
    # The link then opens the plain runs table, not a view the store lacks.
    assert "MLflow: http://127.0.0.1:5000/#/experiments/" in out
    assert "viewStateShareKey" not in out


def test_the_view_link_is_on_the_server_without_its_credentials():
    assert view.link("http://user:s3cret@mlflow.example:5000/", "7") == \
        "http://mlflow.example:5000/#/experiments/7/runs?viewStateShareKey=rnnexp"
    assert view.link("https://host/mlflow", "7", shared=False) == \
        "https://host/mlflow/#/experiments/7/runs"
    assert view.link("postgresql://u:pw@db/mlflow", "3").startswith(
        "http://127.0.0.1:5000/#/experiments/3/runs")
    assert view.link("databricks", "3") is None
