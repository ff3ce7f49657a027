"""One test per fault a hostile config or a hostile world can cause: signals with an isolated
child, concurrent first use of a store (runs and sweeps), a crash and an out-of-memory inside
a sweep, a failed verification, a password in a tracking URI, a target outside the allowlist,
an unwritable run folder. Real processes, real MLflow stores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from mlflow.tracking import MlflowClient

from rnnexp.config import credentials
from rnnexp.config.schema import validate
from rnnexp.errors import ConfigError
from rnnexp.machine import memory
from rnnexp.results import exit_codes
from rnnexp.results.result import CRASHED, INVALID, OK, UNSUPPORTED
from tests.conftest import ROOT, TINY, compose_cfg, load_results

FAULTY = "tests.faulty_models"


def start(*args: str, tmp: Path, env: dict | None = None) -> subprocess.Popen:
    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", "RNNEXP_TARGETS": "tests",
                "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "rnnexp", *args], cwd=ROOT, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run(*args: str, tmp: Path, env: dict | None = None, timeout: float = 600):
    proc = start(*args, tmp=tmp, env=env)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def runs_in(uri: str) -> list:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rnnexp")
    return client.search_runs([exp.experiment_id]) if exp else []


def isolated_child(parent: psutil.Process, timeout: float = 180) -> psutil.Process:
    """A worker process measuring the job: a child of multiprocessing's fork server."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for child in parent.children(recursive=True):
            try:
                if "forkserver" in " ".join(child.parent().cmdline()):
                    return child
            except (psutil.NoSuchProcess, AttributeError):
                continue
        time.sleep(0.2)
    raise AssertionError("the isolated job process never started")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.slow
def test_signal_kills_the_isolated_child_and_records_killed(signum, tmp_path):
    proc = start("-m", "model=jit", "backend=jit", "shape=small", "bench.warmup=0",
                 "bench.iters=1000000", "bench.verify=false", "seed=0,1",
                 f"hydra.sweep.dir={tmp_path}/sweep", tmp=tmp_path)
    parent = psutil.Process(proc.pid)
    child = isolated_child(parent)
    time.sleep(2)  # well inside the timed loop
    family = [child, *parent.children(recursive=True)]
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == exit_codes.for_signal(signum)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("interleaved:")]
    assert lines == [f"error: interrupted by {signal.Signals(signum).name} — the current run "
                     f"is recorded as killed"]
    time.sleep(0.5)
    alive = [p.pid for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [], "orphaned processes"
    runs = runs_in(f"sqlite:///{tmp_path}/mlflow.db")
    jobs = [r for r in runs if r.data.tags["rnnexp.kind"] == "job"]
    (parent,) = [r for r in runs if r.data.tags["rnnexp.kind"] == "sweep"]
    # Both jobs were being measured together (interleaved): both recorded, both killed.
    assert len(jobs) == 2
    assert all(r.info.status == "KILLED" and r.data.tags["status"] == "interrupted"
               for r in jobs)
    assert parent.info.status == "KILLED"
    for folder in ("0", "1"):
        assert load_results(tmp_path / "sweep" / folder)["status"] == "interrupted"


def test_sweep_mixing_out_of_memory_good_unsupported_too_large_crashing_and_wrong_jobs(
        tmp_path, migrated_store):
    """Every job recorded with its status, one line per crash with the real exception, an
    out-of-memory one job's failure, the sweep goes on to its summary, the parent ends FAILED
    after the last job, exit 1."""
    migrated_store(tmp_path / "mlflow.db")
    code, out, err = run(
        "-m", *TINY, f"model.build._target_={FAULTY}.out_of_memory,rnnexp.models.native.lstm,"
        f"{FAULTY}.crashing,{FAULTY}.wrong", "backend=aten,cudnn",
        "shape.hidden_size=32,900000", f"hydra.sweep.dir={tmp_path}/sweep", tmp=tmp_path)
    assert code == exit_codes.JOB_FAILED, err
    assert "Traceback" not in out + err
    crash_lines = [ln for ln in err.splitlines() if ln.startswith("crashed:")]
    assert len(crash_lines) == 2, err
    assert crash_lines[0].startswith("crashed: lstm(build._target_=out_of_memory)·aten·small("
                                     "hidden_size=32): out of memory at "), err
    assert crash_lines[1] == "crashed: lstm(build._target_=crashing)·aten·small(hidden_size=" \
        "32): ValueError: planted crash in the model factory"
    results = [load_results(tmp_path / f"sweep/{i}") for i in range(16)]
    assert not (tmp_path / "sweep/16").exists()
    statuses = sorted(r["status"] for r in results)
    assert statuses == sorted([OK, CRASHED, CRASHED, INVALID] + [UNSUPPORTED] * 12)
    too_large = [r for r in results if "shape.hidden_size=900000" in r["reason"]]
    assert len(too_large) == 4 and all(r["status"] == UNSUPPORTED for r in too_large)
    # The first job runs out of memory; the jobs after it go on (job 4: nn.LSTM, aten, 32).
    oom = results[0]
    assert oom["status"] == CRASHED
    assert oom["reason"].startswith("out of memory at shape.seq_len=8, shape.batch_size=4")
    assert "can't allocate memory" in oom["reason"]
    assert results[4]["status"] == OK
    crashed = [r for r in results if r["status"] == CRASHED and r is not oom]
    assert [r["reason"] for r in crashed] == ["ValueError: planted crash in the model factory"]
    # A wrong result carries no rates anywhere.
    invalid = next(r for r in results if r["status"] == INVALID)
    for phase in invalid["phases"].values():
        if "median_ms" in phase:
            assert phase["tokens_per_s"] is None and phase["gflops"] is None
            assert phase["gbps"] is None
    summary = json.loads((tmp_path / "sweep/summary/summary.json").read_text())
    assert len(summary) == 16
    assert (tmp_path / "sweep/summary/fwd_bwd.png").exists()
    assert out.count("rnnexp sweep: 16 jobs") == 1
    runs = runs_in(f"sqlite:///{tmp_path}/mlflow.db")
    parent = next(r for r in runs if r.data.tags["rnnexp.kind"] == "sweep")
    jobs = [r for r in runs if r.data.tags["rnnexp.kind"] == "job"]
    assert len(jobs) == 16
    assert parent.info.status == "FAILED"
    assert parent.info.end_time >= max(r.info.end_time for r in jobs)
    wrong = next(r for r in jobs if r.data.tags["status"] == INVALID)
    assert not [k for k in wrong.data.metrics if k.endswith(("tokens_per_s", "gflops", "gbps"))]
    assert [r.info.status for r in jobs if r.data.tags["status"] == CRASHED] == ["FAILED"] * 2


def test_crash_in_an_isolated_child_reports_the_real_exception(tmp_path, migrated_store):
    migrated_store(tmp_path / "mlflow.db")
    code, out, err = run(*TINY, "model=jit", "backend=jit",
                         f"model.build._target_={FAULTY}.crashing",
                         f"hydra.run.dir={tmp_path}/run", tmp=tmp_path)
    assert code == exit_codes.JOB_FAILED
    assert "Traceback" not in err
    assert [ln for ln in err.splitlines() if ln.strip()] == [
        "crashed: jit(build._target_=crashing)·jit·small: ValueError: planted crash in the "
        "model factory"]
    data = load_results(tmp_path / "run")
    assert (data["status"], data["reason"]) == (CRASHED, "ValueError: planted crash in the "
                                                         "model factory")
    (run_,) = runs_in(f"sqlite:///{tmp_path}/mlflow.db")
    assert run_.info.status == "FAILED"


def test_failed_verification_exits_1_with_no_rates_anywhere(tmp_path, migrated_store):
    migrated_store(tmp_path / "mlflow.db")
    code, out, err = run(*TINY, f"model.build._target_={FAULTY}.wrong", "+sinks=fastrnns",
                         f"hydra.run.dir={tmp_path}/run", tmp=tmp_path)
    assert code == exit_codes.JOB_FAILED
    data = load_results(tmp_path / "run")
    assert data["status"] == INVALID
    assert all(p.get("tokens_per_s") is None and p.get("gflops") is None
               for p in data["phases"].values())
    assert "{}" in out.splitlines()  # fastrnns JSON: nothing
    (run_,) = runs_in(f"sqlite:///{tmp_path}/mlflow.db")
    assert run_.info.status == "FAILED"
    assert not [k for k in run_.data.metrics if k.endswith(("tokens_per_s", "gflops", "gbps"))]


@pytest.mark.slow
def test_password_in_a_tracking_uri_is_written_nowhere(tmp_path):
    secret = "s3cr3t-pw"
    code, out, err = run(*TINY, f"sinks.mlflow.uri=http://alice:{secret}@127.0.0.1:9/",
                         f"hydra.run.dir={tmp_path}/run", tmp=tmp_path)
    assert code == 0, err
    assert "not reachable" in err  # the store is down: kept for sync
    code, out2, err2 = run("-m", *TINY, "seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep",
                           tmp=tmp_path,
                           env={"MLFLOW_TRACKING_URI": f"http://bob:{secret}@127.0.0.1:9"})
    assert code == 0, err2
    store = tmp_path / "synced.db"
    for folder in ("run", "sweep"):
        sync = subprocess.run([sys.executable, "-m", "rnnexp", "sync", str(tmp_path / folder),
                               "--tracking-uri", f"sqlite:///{store}"], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert sync.returncode == 0, sync.stderr
        assert secret not in sync.stdout + sync.stderr
    assert len(runs_in(f"sqlite:///{store}")) == 4  # 1 run + a sweep's parent and 2 jobs
    assert secret not in out + err + out2 + err2
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 20 and store in files
    leaked = [str(p) for p in files if secret.encode() in p.read_bytes()
              or b"alice" in p.read_bytes() or b"bob:" in p.read_bytes()]
    assert leaked == []


def test_credentials_leave_the_uri(monkeypatch):
    for key in (credentials.USERNAME_ENV, credentials.PASSWORD_ENV, credentials.URIS_ENV):
        monkeypatch.delenv(key, raising=False)
    assert credentials.take("https://u%40x:p%3Aw@h:5000/x") == "https://h:5000/x"
    assert os.environ[credentials.USERNAME_ENV] == "u@x"
    assert os.environ[credentials.PASSWORD_ENV] == "p:w"
    assert credentials.redact("store http://a:b@h/ and sqlite:////x.db") == \
        "store http://***@h/ and sqlite:////x.db"


@pytest.mark.parametrize("uri, secret", [
    ("http://alice:p@ss/w0rd@h:5000", "p@ss/w0rd"),  # '@' and '/' unencoded
    ("https://alice:p%40ss%2Fw0rd@h:5000/x", "p%40ss%2Fw0rd"),
    ("http://h:5000/?token=T0KEN&x=1", "T0KEN"),
    ("http://h:5000/?x=1&api_key=T0KEN", "T0KEN"),
    ("postgresql://bob:p@ss/w0rd@db:5432/mlflow", "p@ss/w0rd"),
])
def test_a_hidden_uri_shows_no_secret_and_connects_with_it(uri, secret, monkeypatch):
    for key in (credentials.USERNAME_ENV, credentials.PASSWORD_ENV, credentials.URIS_ENV):
        monkeypatch.delenv(key, raising=False)
    shown = credentials.hide(uri)
    assert secret not in shown and "w0rd" not in shown
    assert credentials.reveal(shown) == uri  # here, and in child processes (environment)
    connects = credentials.take(credentials.reveal(shown))
    if uri.startswith("postgresql"):  # the database driver needs its password in the URI
        assert connects == uri
    elif "@" in uri:  # HTTP basic auth through MLflow's variables
        assert connects == uri.split("@")[0].split("//")[0] + "//" + uri.rsplit("@", 1)[1]
        assert os.environ[credentials.PASSWORD_ENV] == "p@ss/w0rd"


def test_a_credential_in_any_jobs_config_file_is_written_nowhere(tmp_path, migrated_store):
    """A sweep whose second job picks a YAML holding a token: hidden in that job too, not
    only in what the first job's (the sweep's base) composition holds."""
    migrated_store(tmp_path / "mlflow.db")
    extra = tmp_path / "configs" / "experiment"
    extra.mkdir(parents=True)
    (extra / "plain.yaml").write_text("# @package _global_\nseed: 1\n")
    (extra / "down.yaml").write_text(
        "# @package _global_\nsinks:\n  mlflow:\n    uri: http://127.0.0.1:9/?token=T0KEN\n")
    code, out, err = run("-m", *TINY, f"hydra.searchpath=[file://{tmp_path}/configs]",
                         "+experiment=plain,down", f"hydra.sweep.dir={tmp_path}/sweep",
                         tmp=tmp_path)
    assert code == 0, err
    assert "not reachable" in err and "T0KEN" not in out + err
    down = load_results(tmp_path / "sweep" / "1")
    assert down["config"]["sinks"]["mlflow"]["uri"] == "http://127.0.0.1:9/?token=***"
    files = [p for p in tmp_path.rglob("*") if p.is_file() and "configs" not in p.parts]
    assert len(files) > 10
    assert [str(p) for p in files if b"T0KEN" in p.read_bytes()] == []


def test_memory_estimate_decides_by_what_is_free():
    cfg = validate(compose_cfg(["shape=default", "device=cuda"]))
    est = memory.estimate(cfg)
    assert 1 << 20 < est.device_bytes < 2 << 30  # the fastrnns default shape: ~MBs, not GBs
    gpu = torch.device("cuda", 0)
    memory.check(cfg, gpu, free={"device": 80 << 30, "host": 64 << 30})
    with pytest.raises(ConfigError, match=r"^shape: needs about .* of memory on cuda:0 free"):
        memory.check(cfg, gpu, free={"device": est.device_bytes - 1, "host": 64 << 30})
    with pytest.raises(ConfigError, match="of RAM free"):
        memory.check(cfg, gpu, free={"device": 80 << 30, "host": est.host_bytes - 1})


def test_exit_status_of_a_set_of_jobs():
    assert exit_codes.for_statuses([OK, UNSUPPORTED]) == exit_codes.OK
    assert exit_codes.for_statuses([OK, INVALID]) == exit_codes.JOB_FAILED
    assert exit_codes.for_statuses([CRASHED]) == exit_codes.JOB_FAILED
    assert (exit_codes.SIGINT, exit_codes.SIGTERM) == (130, 143)
    assert len({exit_codes.OK, exit_codes.JOB_FAILED, exit_codes.USER_ERROR,
                exit_codes.REGRESSION, exit_codes.SIGINT, exit_codes.SIGTERM}) == 6


@pytest.mark.parametrize("target", ["model.build._target_", "+hydra.callbacks.evil._target_"])
def test_a_target_outside_the_allowlist_never_runs(target, tmp_path):
    """os.remove named as a target, with a file to delete: refused before Hydra starts, the
    file survives, nothing is recorded."""
    victim = tmp_path / "keep.txt"
    victim.write_text("still here")
    node = target.removesuffix("._target_")
    code, out, err = run(*TINY, f"{target}=os.remove", f"+{node.lstrip('+')}.path={victim}",
                         f"hydra.run.dir={tmp_path}/run", tmp=tmp_path)
    assert code == exit_codes.USER_ERROR
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "os.remove" in lines[0]
    assert "Traceback" not in out + err
    assert victim.read_text() == "still here"
    assert not (tmp_path / "run").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("where", ["under_a_file", "proc"])
def test_an_unwritable_run_folder_is_one_line_before_anything_runs(where, tmp_path):
    if where == "under_a_file":
        (tmp_path / "a_file").write_text("")
        folder = tmp_path / "a_file" / "run"
    else:  # /proc refuses new folders even to root
        folder = Path("/proc/rnnexp-test/run")
    code, out, err = run(*TINY, f"hydra.run.dir={folder}", tmp=tmp_path)
    assert code == exit_codes.USER_ERROR
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: hydra.run.dir: cannot create")
    assert "choose a writable folder" in lines[0] and "Traceback" not in out + err
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_concurrent_runs_and_sweeps_on_a_fresh_store_are_all_recorded(tmp_path):
    """Two single runs and two sweeps started together on a store none of them finds: each
    creates it or waits for it, and every run lands."""
    uri = f"sqlite:///{tmp_path}/fresh.db"
    env = {"MLFLOW_TRACKING_URI": uri}
    procs = [start(*TINY, f"seed={i}", f"hydra.run.dir={tmp_path}/run{i}", tmp=tmp_path,
                   env=env) for i in (10, 11)]
    procs += [start("-m", *TINY, f"seed={2 * i},{2 * i + 1}",
                    f"hydra.sweep.dir={tmp_path}/sweep{i}", tmp=tmp_path, env=env)
              for i in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        assert "not reachable" not in err
    runs = runs_in(uri)
    kinds = sorted(r.data.tags["rnnexp.kind"] for r in runs)
    assert kinds == ["job"] * 6 + ["sweep"] * 2
    parents = {r.info.run_id for r in runs if r.data.tags["rnnexp.kind"] == "sweep"}
    swept = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert {r.data.tags["mlflow.parentRunId"] for r in swept} == parents and len(swept) == 4
    assert sorted(r.data.params["seed"] for r in runs if r.data.tags["rnnexp.kind"] == "job") \
        == ["0", "1", "10", "11", "2", "3"]
    assert all(r.info.status == "FINISHED" for r in runs)
