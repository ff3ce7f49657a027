"""Saved results read back — by `sync` and `compare` — as a careless operator hands them over:
a result with a field no result has, NaN samples, a binary file, a missing path, a plain
file, an output that cannot be written. Each is one line naming the path (and the field),
exit 2, nothing uploaded; `sync` never writes into what it reads; `compare` takes result
files and run folders as well as sweeps. The commands run in this process, through the
error boundary every command shares (rnnexp.app.commands)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rnnexp.app.commands import run_command
from tests.conftest import ROOT, TINY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One real two-job sweep folder, recorded to results.json only (tests copy it)."""
    tmp = tmp_path_factory.mktemp("inputs")
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/unused.db"}
    proc = subprocess.run([sys.executable, "-m", "rnnexp", "-m", *TINY, "seed=0,1",
                           "sinks=[json]", f"hydra.sweep.dir={tmp}/sweep"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return tmp / "sweep"


def command(capsys, name: str, *args: str) -> tuple[int, str, str]:
    code = run_command(name, list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err
    return lines[0]


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file below `folder`: its bytes and modification time."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def changed(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


# (what is wrong, how the job's results.json is changed, what the one line says)
BROKEN = [
    ("int status", lambda d: d.update(status=7), '"status": 7 is not a status'),
    ("NaN samples", lambda d: d["phases"]["forward"]["samples_ms"].__setitem__(0, float("nan")),
     '"phases.forward.samples_ms" holds nan'),
    ("NaN median", lambda d: d["phases"]["forward"].update(median_ms=float("nan")),
     '"phases.forward.median_ms": nan is not a finite number'),
    ("negative sample", lambda d: d["phases"]["backward"]["samples_ms"].__setitem__(1, -2.0),
     '"phases.backward.samples_ms" holds -2.0'),
    ("text that is a number", lambda d: d.update(reason=3), '"reason": 3 is not text'),
    ("choices not an object", lambda d: d.update(choices=["lstm"]), '"choices" is not'),
]


@pytest.mark.parametrize("name, edit, said", BROKEN, ids=[b[0] for b in BROKEN])
@pytest.mark.parametrize("tool", ["sync", "compare"])
def test_a_result_no_job_could_have_written_is_named_with_its_field(tool, name, edit, said,
                                                                    sweep, tmp_path, capsys):
    folder = tmp_path / "sweep"
    shutil.copytree(sweep, folder)
    changed(folder / "1" / "results.json", edit)
    before = snapshot(folder)
    store = tmp_path / "store.db"
    args = ["--tracking-uri", f"sqlite:///{store}"] if tool == "sync" else \
        ["--output", str(tmp_path / "chart.png")]
    code, out, err = command(capsys, tool, str(folder), *args)
    assert code == 2, err
    line = one_line(err)
    assert line.startswith(f"error: {folder / '1' / 'results.json'}: ") and said in line
    assert snapshot(folder) == before
    assert not store.exists() and not (tmp_path / "chart.png").exists()


def test_sync_never_writes_into_the_folder_it_reads(sweep, tmp_path, capsys):
    """A sweep folder without its summary (its launcher was killed before the end): the
    parent run gets the summary, the folder stays as it was, byte for byte."""
    folder = tmp_path / "sweep"
    shutil.copytree(sweep, folder)
    shutil.rmtree(folder / "summary")
    before = snapshot(folder)
    code, out, err = command(capsys, "sync", str(folder), "--tracking-uri",
                             f"sqlite:///{tmp_path}/store.db")
    assert code == 0, err
    assert "2 uploaded" in out
    assert snapshot(folder) == before
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/store.db")
    exp = client.get_experiment_by_name("rnnexp")
    (parent,) = client.search_runs([exp.experiment_id], "tags.`rnnexp.kind` = 'sweep'")
    summary = {a.path for a in client.list_artifacts(parent.info.run_id, "summary")}
    assert "summary/summary.json" in summary and "summary/fwd_bwd.png" in summary


def test_sync_takes_a_runs_results_file(sweep, tmp_path, capsys):
    code, out, err = command(capsys, "sync", str(sweep / "0" / "results.json"),
                             "--tracking-uri", f"sqlite:///{tmp_path}/store.db")
    assert code == 0, err
    assert "1 uploaded" in out


@pytest.mark.parametrize("tool", ["sync", "compare"])
@pytest.mark.parametrize("what", ["missing", "binary file", "binary results.json", "text file",
                                  "empty folder", "named pipe"])
def test_a_path_that_holds_no_result_says_what_it_is(tool, what, tmp_path, capsys):
    path = {"missing": tmp_path / "nope", "binary file": tmp_path / "data.bin",
            "binary results.json": tmp_path / "run" / "results.json",
            "text file": tmp_path / "notes.txt", "empty folder": tmp_path / "empty",
            "named pipe": tmp_path / "pipe"}[what]
    said = {"missing": "no such file or folder", "binary file": "is not text",
            "binary results.json": "is not text", "text file": "is not complete JSON",
            "empty folder": "no results.json under this folder",
            "named pipe": "is a named pipe, not a results file or folder"}[what]
    if what in ("binary file", "binary results.json"):
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 10)
    elif what == "text file":
        path.write_text("some notes\n")
    elif what == "empty folder":
        path.mkdir()
    elif what == "named pipe":
        os.mkfifo(path)
    store = tmp_path / "store.db"
    code, out, err = command(capsys, tool, str(path), "--tracking-uri", f"sqlite:///{store}")
    assert code == 2, err
    line = one_line(err)
    assert str(path) in line and said in line
    assert "MLflow" not in line and "store" not in line  # the path is named, not the store
    assert not store.exists()


def test_compare_of_a_name_that_is_neither_a_path_nor_a_sweep_says_both(tmp_path, capsys):
    code, out, err = command(capsys, "compare", "nosuchsweep", "--tracking-uri",
                             f"sqlite:///{tmp_path}/none.db")
    assert code == 2
    line = one_line(err)
    assert line.startswith("error: nosuchsweep: no such file or folder, nor a sweep")


def test_compare_two_result_files_as_pyperf_compare_to_does(sweep, tmp_path, capsys):
    """`compare A B`: B against baseline A, as `pyperf compare_to a.json b.json`."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    shutil.copy(sweep / "0" / "results.json", a)
    shutil.copy(sweep / "1" / "results.json", b)
    code, out, err = command(capsys, "compare", str(a), str(b), "--output",
                             str(tmp_path / "ab.png"))
    assert code == 0, err
    assert "speedup" in out and (tmp_path / "ab.png").exists()
    code, out, err = command(capsys, "compare", str(sweep / "0"), str(sweep / "1"),
                             "--output", str(tmp_path / "folders.png"))
    assert code == 0, err
    code, _, err = command(capsys, "compare", str(a), str(b), str(a))
    assert code == 2 and "3 sweeps given" in one_line(err)
    code, _, err = command(capsys, "compare", str(a), str(b), "--against", str(a))
    assert code == 2 and "drop --against" in one_line(err)


def test_a_folder_of_repeated_runs_shows_when_and_from_which_commit(sweep, tmp_path, capsys):
    """outputs/runs: runs of one configuration read alike but for their date and commit."""
    runs = tmp_path / "runs"
    for n, commit in enumerate(("aaaaaaaaaa11", "bbbbbbbbbb22", "bbbbbbbbbb22")):
        (runs / f"2026-11-2{n}" / "10-00-00").mkdir(parents=True)
        data = json.loads((sweep / "0" / "results.json").read_text())
        data.update(git_commit=commit, started_at=f"2026-11-2{n}T10:00:0{n}+00:00")
        (runs / f"2026-11-2{n}" / "10-00-00" / "results.json").write_text(json.dumps(data))
    code, out, err = command(capsys, "compare", str(runs), "--output", str(tmp_path / "r.png"))
    assert code == 0, err
    assert "date" in out and "commit" in out
    for n, commit in enumerate(("aaaaaaaaaa", "bbbbbbbbbb", "bbbbbbbbbb")):
        assert f"2026-11-2{n} 10:00:0{n}" in out and commit in out
    code, out, err = command(capsys, "compare", str(sweep), "--output", str(tmp_path / "s.png"))
    assert code == 0 and "commit" not in out  # rows told apart by what varies: no more


@pytest.mark.parametrize("output, said", [
    ("/proc/x.png", "--output /proc/x.png: cannot be written in /proc"),
    ("{tmp}", "is a folder"),
    ("{tmp}/a_file/x.png", "cannot be written in {tmp}/a_file (Not a directory)"),
])
def test_compare_output_that_cannot_be_written_is_one_line_before_anything(
        output, said, sweep, tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    output, said = output.format(tmp=tmp_path), said.format(tmp=tmp_path)
    code, out, err = command(capsys, "compare", str(sweep), "--output", output)
    assert code == 2 and out == ""
    assert said in one_line(err)


@pytest.mark.parametrize("experiment, said", [
    ("", "--experiment: is empty"),
    ("   ", "--experiment: is empty"),
    ("x" * 1000, "--experiment: is 1000 characters long; MLflow takes at most 500"),
])
def test_sync_refuses_an_experiment_mlflow_would_not_take(experiment, said, sweep, tmp_path,
                                                          capsys):
    code, out, err = command(capsys, "sync", str(sweep), f"--experiment={experiment}",
                             "--tracking-uri", f"sqlite:///{tmp_path}/store.db")
    assert code == 2
    assert said in one_line(err)
    assert not (tmp_path / "store.db").exists()


def test_the_experiment_name_limit_is_mlflows():
    from mlflow.utils.validation import MAX_EXPERIMENT_NAME_LENGTH

    from rnnexp.results.sinks.mlflow import MAX_EXPERIMENT_NAME

    assert MAX_EXPERIMENT_NAME == MAX_EXPERIMENT_NAME_LENGTH
