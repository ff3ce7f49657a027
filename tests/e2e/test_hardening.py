"""Bad input through the real CLI: each is refused with exit status 2 and exactly one line on
stderr naming the field, no traceback, no run folder and nothing in the store.

The whole battery runs through `rnnexp.app.cli.main` in this process (the same code path as
`python -m rnnexp`: argument parsing, Hydra composition, the checks, Hydra's own entry point);
a representative subset also runs as real `python -m rnnexp` processes, started together.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, in_process

# (command-line arguments, text the one error line must contain — the field it names)
BAD_INPUTS = [
    (["shape.hidden_size=-3"], "shape.hidden_size"),
    (["shape.batch_size=0"], "shape.batch_size"),
    (["shape.seq_len=0"], "shape.seq_len"),
    (["shape.num_layers=0"], "shape.num_layers"),
    (["shape.input_size=-1"], "shape.input_size"),
    (["shape.hidden_size=abc"], "shape.hidden_size"),
    (["shape.min_len=50", "shape.max_len=40"], "shape.min_len"),
    (["shape.foo=1"], "shape.foo"),
    (["+shape.foo=1"], "shape.foo"),
    (["+bench.itters=50"], "did you mean bench.iters?"),
    (["bench.itters=50"], "did you mean bench.iters?"),
    (["bench.iters=0"], "bench.iters"),
    (["bench.warmup=-1"], "bench.warmup"),
    (["bench.precision=1.5"], "bench.precision"),
    (["bench.precision=0.02", "bench.min_iters=3"], "bench.min_iters"),
    (["bench.num_threads=0"], "bench.num_threads"),
    (["bench.backward=maybe"], "bench.backward"),
    (["device.index=-1"], "device.index"),
    (["device.kind=tpu"], "device.kind"),
    (["dtype=float64"], "dtype"),
    (["seed=99999999999999999999"], "seed"),
    (["seed=-1"], "seed"),
    (["seed=abc"], "seed"),
    (["model=nope"], "model=nope"),
    (["backend=nope"], "backend=nope"),
    (["shape=nope"], "shape=nope"),
    (["model=lstm_dropout", "model.build.dropout=1.5"], "model.build.dropout"),
    (["model=lstm_dropout", "model.build.dropout=-0.1"], "model.build.dropout"),
    (["model=lstm_dropout", "model.build.dropout=abc"], "model.build.dropout"),
    (["model=jit_dropout", "model.build.dropout=1.0"], "model.build.dropout"),
    (["model=quantized_lstm", "model.build.weight_dtype=int4"], "model.build.weight_dtype"),
    (["model=dynamic_eltwise", "model.build.pool_size=0"], "model.build.pool_size"),
    (["+model.build.nope=1"], "model.build"),
    (["+model.build.x._target_=builtins.open", "+model.build.x.file=victim.txt",
      "+model.build.x.mode=w"], "model.build.x._target_"),
    (["+model.build.a.b.c._target_=os.system"], "model.build.a.b.c._target_"),
    (["+model.build.x={_target_:subprocess.run,args:[touch,pwned]}"],
     "model.build.x._target_"),
    (["model.build._target_=subprocess.run"], "model.build._target_"),
    (["sinks.mlflow._target_=os.system"], "sinks.mlflow._target_"),
    (["+hydra.callbacks.evil._target_=os.system"], "hydra.callbacks.evil._target_"),
    (["backend=jit", "backend.executor=fast"], "backend.executor"),
    (["backend=jit", "+backend.exector=simple"], "did you mean backend.executor?"),
    (["backend=aten", "backend.allow_tf32=true"], "backend.allow_tf32"),
    (["backend=inductor", "backend.mode=fast"], "backend.mode"),
    (["foo=1"], "foo: no such field"),
    (["+foo=1"], "foo: no such field"),
    (["sinks.mlflow.uri=relative.db"], "sinks.mlflow.uri"),
    (["+sinks=fastrnns", "sinks.fastrnns.format=xml"], "sinks.fastrnns.format"),
    (["shape.hidden_size=200000", "shape.seq_len=100000"], "shape.hidden_size=200000"),
    (["shape.hidden_size=8192", "shape.seq_len=100000"], "shape.seq_len=100000"),
    (["shape.batch_size=999999999999"], "shape.batch_size=999999999999"),
    (["hydra.run.dir=/proc/nope"], "hydra.run.dir"),
    (["shape.seq_len=["], "shape.seq_len=["),
    (["hydra.job.chdir=abc"], "hydra.job.chdir"),
    (["backend=cudnn"], "backend=cudnn"),
    (["device=cuda"], "device=cuda"),
    (["model=quantized_lstm", "dtype=float16"], "dtype"),
    (["-m", "model=lstm,nope"], "model=nope"),
    (["-m", "model=lstm,jit", "+shape.foo=1,2"], "shape.foo"),
    (["-m", "seed=0,-5"], "seed"),
    (["-m", "model=lstm,jit", "hydra.sweep.dir=/proc/nope"], "hydra.sweep.dir"),
    # A target is judged by what it resolves to, and nothing is built while checking.
    (["+sinks.evil._target_=rnnexp.app.cli.os.system", "+sinks.evil.command='touch pwned'"],
     "sinks.evil._target_: 'rnnexp.app.cli.os.system' is posix.system"),
    (["+model.build.x._target_=rnnexp.app.cli.subprocess.run", "+model.build.x.args=[touch,pwned]"],
     "model.build.x._target_"),
    (["+sinks.evil._target_=rnnexp.app.cli.discard", "+sinks.evil.output_dir=."],
     "is not an rnnexp Sink"),
    (["model.build._target_=rnnexp.app.cli.discard"], "is not a model factory"),
    (["+hydra.callbacks.evil._target_=hydra.utils.instantiate",
      "+hydra.callbacks.evil.config={_target_:rnnexp.app.cli.discard,output_dir:.}"],
     "hydra.callbacks.evil._target_"),
    (["+hydra.callbacks.evil._target_=rnnexp.app.callback.RunCheck",
      "+hydra.callbacks.evil.x={_target_:rnnexp.app.cli.discard,output_dir:.}"],
     "hydra.callbacks.evil.x._target_: Hydra would call it"),
    (["hydra.job_logging.handlers.console.class=rnnexp.app.cli.os.system"],
     "hydra.job_logging.handlers.console.class"),
    (["+hydra.job.env_set.LD_PRELOAD=/tmp/evil.so"], "hydra.job.env_set.LD_PRELOAD"),
    (["+hydra.job.env_set.RNNEXP_TARGETS=os"], "hydra.job.env_set.RNNEXP_TARGETS"),
    (["--experimental-rerun", "x.pickle"], "--experimental-rerun"),
    # Sweep grammar that needs the config repository, null and huge values, interpolations.
    (["-m", "model=glob(lstm*)", "+shape.foo=1"], "shape.foo"),
    (["-m", "+deepbench=glob(*)", "+bench.itters=1"], "bench.itters"),
    (["-m", "seed=range(0,2)", "+shape.foo=1"], "shape.foo"),
    (["model=null"], "model: null is not an option"),
    (["~model"], "model"),
    (["seed=" + "9" * 400], "seed: must be in"),
    (["shape.seq_len=" + "9" * 5000], "shape.seq_len"),
    (["shape.seq_len=${oc.env:RNNEXP_SURELY_MISSING}"], "shape.seq_len"),
    (["shape.seq_len=${nosuch:x}"], "shape.seq_len"),
    (["seed=${seed}"], "seed"),
    (["hydra.run.dir=/tmp/" + "a" * 300 + "/x"], "hydra.run.dir"),
    # Bounds, checked before anything runs.
    (["bench.iters=1000000000"], "bench.iters: must be ≤ 1e+06"),
    (["bench.warmup=1000000000"], "bench.warmup"),
    (["bench.block_ms=inf"], "bench.block_ms: must be a finite number"),
    (["bench.round_ms=nan"], "bench.round_ms: must be a finite number"),
    (["deepbench.scale=-1"], "deepbench.scale"),
    (["model.family=banana"], "model.family"),
    (["resume=true"], "resume: only applies to a sweep"),
    (["sinks=[]"], "sinks: is empty"),
    (["hydra.run.dir="], "hydra.run.dir: is empty"),
    (["-m", "seed=1,2", "hydra.sweep.subdir=../escaped"], "hydra.sweep.subdir"),
    (["-m", "seed=1,2", "hydra/launcher=rnnexp_local", "hydra.launcher.timeout_min=-1"],
     "hydra.launcher.timeout_min"),
    (["sinks.mlflow.uri=ftp://host/x"], "sinks.mlflow.uri"),
    (["sinks.mlflow.uri=nosuch://x"], "sinks.mlflow.uri"),
    (["sinks.mlflow.uri=sqlite:////proc/nope/mlflow.db"], "sinks.mlflow.uri"),
    # A key given twice (Hydra would take the last without a word), a sweep of no job, an
    # experiment MLflow would refuse only after timing, a size no float holds.
    (["model=lstm", "model=gru"], "model: given twice (model=lstm then model=gru)"),
    (["-m", "model=lstm,jit", "model=gru"], "model: given twice"),
    (["seed=1", "+seed=2"], "seed: given twice"),
    (["-m", "model=glob(nomatch*)"], "model=glob(nomatch*): selects no value"),
    (["-m", "seed=range(0,0)"], "seed=range(0,0): selects no value"),
    (["sinks.mlflow.experiment="], "sinks.mlflow.experiment: is empty"),
    (["sinks.mlflow.experiment=" + "x" * 1000],
     "sinks.mlflow.experiment: is 1000 characters long; MLflow takes at most 500"),
    (["shape.hidden_size=" + "9" * 400], "shape.hidden_size: must be ≤ 2⁶³−1"),
    # A sweep without results.json: its summary, report and compare would have nothing.
    (["-m", "seed=1,2", "sinks=[console]"], "sinks: has no json"),
    # A sweep's values without -m (Hydra: "Ambiguous value"): the way out on the one line.
    (["seed=1,2"], "seed=1,2: several values outside a sweep — to sweep them add -m"),
    (["hydra.mode=MULTIRUN", "model=lstm,gru"], "model=lstm,gru: several values outside"),
]

# Run as real processes too: one of each kind of check.
SUBPROCESS = [0, 9, 20, 26, 33, 43, 47, 50, 51, 52, 57, 60, 65, 69, 70, 73, 81, 82, 87, 92,
              95, 98, 101, 102]


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


def with_dirs(args: list[str], tmp: Path) -> list[str]:
    multirun = "-m" in args
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    if any(a.startswith(key + "=") for a in args):
        return list(args)
    return [*args, f"{key}={tmp}/out"]


@pytest.mark.parametrize("args, field", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_nothing_recorded(args, field, tmp_path, capsys,
                                                       monkeypatch):
    store = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    monkeypatch.chdir(tmp_path)  # a relative file named by a bad config lands here
    (tmp_path / "victim.txt").write_text("keep me")
    code, out = in_process(with_dirs(args, tmp_path), capsys)
    assert code == 2, out.err
    line = one_error_line(out.err)
    assert field in line
    assert "Traceback" not in out.err + out.out
    assert not (tmp_path / "out").exists()
    assert not store.exists()
    assert (tmp_path / "victim.txt").read_text() == "keep me"
    assert not (tmp_path / "pwned").exists()


@pytest.mark.slow  # 24 real processes, ~29 CPU-s; every case runs in-process above
def test_bad_input_through_python_m_rnnexp(tmp_path):
    """The subset as real `python -m rnnexp` processes, started together."""
    procs = []
    for i in SUBPROCESS:
        args, field = BAD_INPUTS[i]
        case = tmp_path / str(i)
        case.mkdir()
        (case / "victim.txt").write_text("keep me")
        env = {**os.environ, "PYTHONWARNINGS": "ignore",
               "MLFLOW_TRACKING_URI": f"sqlite:///{case}/mlflow.db"}
        args = [a.replace("victim.txt", str(case / "victim.txt")) for a in args]
        proc = subprocess.Popen([sys.executable, "-m", "rnnexp", *with_dirs(args, case)],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        procs.append((case, field, proc))
    for case, field, proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 2, err
        assert field in one_error_line(err)
        assert "Traceback" not in out + err
        assert not (case / "out").exists()
        assert not (case / "mlflow.db").exists()
        assert (case / "victim.txt").read_text() == "keep me"


@pytest.mark.parametrize("override", ["hydra.job.chdir=abc", "seed=abc"])
def test_full_error_shows_hydras_traceback(run_cli, override):
    proc = run_cli(override, env={"HYDRA_FULL_ERROR": "1"})
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and override.split("=")[0] in proc.stderr


EVIL_CALLBACK = """# @package _global_
hydra:
  callbacks:
    evil:
      _target_: os.makedirs
      name: {made}
"""

PRIMARY = """defaults: [rnnexp_schema, {{model: lstm}}, {{backend: auto}}, {{shape: small}},
           {{device: auto}}, {{bench: quick}}, {{sinks: [json]}}, _self_]
hydra:
  searchpath: [file://{conf}]
  callbacks:
    evil: {{_target_: os.makedirs, name: {made}}}
"""


@pytest.mark.parametrize("source", ["config-dir", "config-path", "searchpath"])
def test_callback_from_any_config_source_runs_nothing(source, tmp_path, capsys, monkeypatch):
    """Configs from --config-dir, --config-path and hydra.searchpath are checked as conf/
    is: a callback naming os.makedirs there is refused before Hydra builds it (through the
    app's entry point in this process: the flags are read from sys.argv there too)."""
    made = tmp_path / "made"
    folder = tmp_path / "configs"
    (folder / "experiment").mkdir(parents=True)
    (folder / "experiment" / "evil.yaml").write_text(EVIL_CALLBACK.format(made=made))
    if source == "config-path":  # a primary config of its own, finding rnnexp's groups
        (folder / "config.yaml").write_text(PRIMARY.format(conf=ROOT / "conf", made=made))
        args = ["--config-path", str(folder)]
    elif source == "config-dir":
        args = ["--config-dir", str(folder), "+experiment=evil"]
    else:
        args = [f"hydra.searchpath=[file://{folder}]", "+experiment=evil"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    code, out = in_process([*args, f"hydra.run.dir={tmp_path}/out"], capsys)
    assert code == 2, out.err
    assert "hydra.callbacks.evil._target_" in one_error_line(out.err)
    assert "Traceback" not in out.err + out.out
    assert not made.exists()
    assert not (tmp_path / "out").exists()


BROKEN_RESULTS = {"truncated": '{"schema": 2, "status": "ok", "cho', "empty": "",
                  "not-json": "not json at all", "foreign": '{"a": 1}'}


def broken_results(tmp_path: Path, kind: str, layout: str) -> tuple[Path, Path]:
    """A run or sweep folder whose (only) results.json is broken: (the folder, the file)."""
    folder = tmp_path / layout
    job = folder / "0" if layout == "sweep" else folder
    job.mkdir(parents=True)
    (job / "results.json").write_text(BROKEN_RESULTS[kind])
    return folder, job / "results.json"


@pytest.mark.parametrize("kind", sorted(BROKEN_RESULTS))
@pytest.mark.parametrize("layout", ["run", "sweep"])
def test_sync_names_a_broken_results_file_in_one_line(kind, layout, tmp_path, capsys):
    """A truncated, empty or foreign results.json is never uploaded as a result: sync names
    the file and what is wrong with it, in one line, exit 2, and makes no store (in this
    process, through the commands' error boundary; the next test as a real process)."""
    from rnnexp.app.commands import run_command

    folder, file = broken_results(tmp_path, kind, layout)
    code = run_command("sync", [str(folder), "--tracking-uri", f"sqlite:///{tmp_path}/store.db"])
    out = capsys.readouterr()
    assert code == 2, out.err
    assert str(file) in one_error_line(out.err)
    assert "Traceback" not in out.err
    assert not (tmp_path / "store.db").exists()


def test_sync_of_a_broken_results_file_through_python_m_rnnexp(tmp_path):
    folder, file = broken_results(tmp_path, "truncated", "sweep")
    proc = subprocess.run([sys.executable, "-m", "rnnexp", "sync", str(folder), "--tracking-uri",
                           f"sqlite:///{tmp_path}/store.db"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr)
    assert str(file) in line
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "store.db").exists()
