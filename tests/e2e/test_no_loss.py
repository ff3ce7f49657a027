"""Nothing measured is lost: a signal after the table, an output folder that cannot be
written, two runs started together, a sweep folder moved or copied, a launcher interrupted,
a launch that fails. Real processes, real MLflow stores, real signals."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rnnexp.results import exit_codes
from tests.conftest import ROOT, TINY, kill_tree, load_results, path_without_slurm
from tests.faulty_models import STALLED_ENV
from tests.results.test_tracking import runs_of

FAULTY = "tests.faulty_models"


def env_for(tmp: Path, **extra: str) -> dict:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1",
            "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db", **extra}


def start(*args: str, tmp: Path, cwd: Path = ROOT, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rnnexp", *args], cwd=cwd,
                            env=env_for(tmp, **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        kill_tree(proc)
        raise
    return proc.returncode, out, err


@pytest.mark.slow
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


# A disk that fills up during the run: writing a result (results.json, the sweep's summary,
# or, with RNNEXP_TEST_FULL_ALL, any file) under FULL fails as on a real full disk — the
# first write puts half its bytes down, then ENOSPC — at the OS boundary, Python's `open`, in
# the rnnexp process.
FULL_DISK = '''
import builtins, errno, io, os

_full = os.environ["RNNEXP_TEST_FULL"]
_all = bool(os.environ.get("RNNEXP_TEST_FULL_ALL"))
_open = io.open


class _Filling:
    def __init__(self, f, path):
        self._f, self._path = f, path

    def write(self, data):
        self._f.write(data[: len(data) // 2])
        self._f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._path)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __iter__(self):
        return iter(self._f)


def _open_on_a_full_disk(file, mode="r", *args, **kwargs):
    f = _open(file, mode, *args, **kwargs)
    if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+"):
        path = os.path.abspath(os.fspath(file))
        if path.startswith(_full) and (_all or "results.json" in os.path.basename(path)
                                       or "summary" in path):
            return _Filling(f, path)
    return f


io.open = builtins.open = _open_on_a_full_disk
'''


def full_disk(tmp: Path, under: Path, everything: bool = False) -> dict:
    site = tmp / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(FULL_DISK)
    return {"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "RNNEXP_TEST_FULL": str(under), "TMPDIR": str(tmp / "tmp"),
            **({"RNNEXP_TEST_FULL_ALL": "1"} if everything else {})}


def no_partial_file(folder: Path) -> list[str]:
    """Files a write cut short left behind: a results.json or summary that is not whole
    JSON, or a temporary file."""
    left = []
    for path in Path(folder).rglob("*"):
        if path.name.endswith(".tmp"):
            left.append(str(path))
        elif path.suffix == ".json" and path.is_file():
            try:
                json.loads(path.read_text())
            except ValueError:
                left.append(str(path))
    return left


def kept_in(err: str) -> Path:
    """The fallback results.json the one-line error names."""
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error: cannot write")]
    assert "No space left on device" in line or "Not a directory" in line, line
    return Path(line.rsplit("the result is kept in ", 1)[1])


@pytest.mark.slow
def test_a_full_disk_keeps_the_result_elsewhere_and_says_where(tmp_path):
    (tmp_path / "tmp").mkdir()
    code, out, err = finish(start(*TINY, f"hydra.run.dir={tmp_path}/run", tmp=tmp_path,
                                  **full_disk(tmp_path, tmp_path / "run")))
    assert code == exit_codes.OUTPUT_FAILED, err
    assert "Traceback" not in err
    kept = kept_in(err)
    assert kept.parent.parent == tmp_path / "tmp"  # the user's temporary folder
    assert json.loads(kept.read_text())["status"] == "ok"
    assert not (tmp_path / "run" / "results.json").exists()
    assert no_partial_file(tmp_path / "run") == []
    client, _, [child] = runs_of(f"sqlite:///{tmp_path}/mlflow.db")
    assert child.info.status == "FINISHED"  # MLflow recorded it from the fallback folder
    assert "results.json" in {a.path for a in client.list_artifacts(child.info.run_id)}


@pytest.mark.slow
def test_a_full_disk_in_one_job_goes_on_with_the_sweep_and_closes_its_parent(tmp_path):
    (tmp_path / "tmp").mkdir()
    sweep = tmp_path / "sweep"
    code, out, err = finish(start("-m", *TINY, "seed=0,1", f"hydra.sweep.dir={sweep}",
                                  tmp=tmp_path, **full_disk(tmp_path, sweep / "0")))
    assert code == exit_codes.OUTPUT_FAILED, err
    assert "Traceback" not in err
    assert json.loads(kept_in(err).read_text())["config"]["seed"] == 0
    assert load_results(sweep / "1")["status"] == "ok"
    assert (sweep / "summary" / "summary.json").exists()
    _, [parent], children = runs_of(f"sqlite:///{tmp_path}/mlflow.db")
    assert parent.info.status == "FINISHED" and len(children) == 2
    assert {c.data.params["seed"] for c in children} == {"0", "1"}


@pytest.mark.parametrize("launcher", [["hydra/launcher=basic"], []])
@pytest.mark.slow
def test_a_disk_that_fills_after_the_first_job_stops_the_sweep_exit_4(launcher, tmp_path):
    """Everything under job 1's folder fails as on a full disk, Hydra's own files too: the
    sweep stops with one line and exit 4 (an output that cannot be written, not bad input),
    job 0 stays recorded, what was measured of job 1 is kept elsewhere (rnnexp's launcher
    measures both first), the parent run ends, and no file is left half written."""
    (tmp_path / "tmp").mkdir()
    sweep = tmp_path / "sweep"
    code, out, err = finish(start("-m", *launcher, *TINY, "seed=0,1",
                                  f"hydra.sweep.dir={sweep}", tmp=tmp_path,
                                  **full_disk(tmp_path, sweep / "1", everything=True)))
    assert code == exit_codes.OUTPUT_FAILED, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(
        f"error: cannot write {sweep / '1'}/"), err
    assert "No space left on device" in err.strip().splitlines()[-1]
    assert load_results(sweep / "0")["status"] == "ok"
    assert not (sweep / "1" / "results.json").exists()
    assert no_partial_file(sweep) == []
    if not launcher:  # measured with job 0, in one window: kept
        (line,) = [ln for ln in err.splitlines() if "the result is kept in " in ln]
        kept = Path(line.rsplit("the result is kept in ", 1)[1])
        assert json.loads(kept.read_text())["config"]["seed"] == 1
    _, [parent], children = runs_of(f"sqlite:///{tmp_path}/mlflow.db")
    assert parent.info.status != "RUNNING"
    assert "No space left on device" in parent.data.tags["reason"]
    assert "0" in {c.data.params["seed"] for c in children}


@pytest.mark.slow
def test_a_run_folder_gone_mid_run_keeps_the_result_elsewhere(tmp_path):
    """The run's folder replaced by a file while it measures (what a cleanup script or an
    unmounted disk does; permissions do not stop root): the result is kept, exit 4."""
    run, timing = tmp_path / "run", tmp_path / "timing"
    proc = start(*TINY, f"model.build._target_={FAULTY}.pausing", f"hydra.run.dir={run}",
                 tmp=tmp_path, TMPDIR=str(tmp_path), RNNEXP_TARGETS="tests",
                 **{STALLED_ENV: str(timing)})
    try:
        deadline = time.monotonic() + 300
        while not timing.exists():  # the model's first timed call waits for the go
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        shutil.rmtree(run)
        run.write_text("not a folder any more")
        timing.with_name(timing.name + ".go").touch()
    except BaseException:
        kill_tree(proc)
        raise
    code, out, err = finish(proc)
    assert code == exit_codes.OUTPUT_FAILED, err
    kept = kept_in(err)
    assert kept.parent.parent == tmp_path
    assert json.loads(kept.read_text())["status"] == "ok"
    _, _, [child] = runs_of(f"sqlite:///{tmp_path}/mlflow.db")
    assert child.info.status == "FINISHED"


@pytest.mark.slow
def test_two_runs_started_together_never_share_a_folder(tmp_path):
    """Both runs get the same folder from their config (as two runs of the default
    outputs/runs/<date>/<time> do when they start in the same second): one takes it, the
    other the next free name, and each folder and MLflow run holds its own result."""
    conf = tmp_path / "configs" / "experiment"
    conf.mkdir(parents=True)
    (conf / "together.yaml").write_text(
        "# @package _global_\nhydra:\n  run:\n    dir: together\n")
    common = [*TINY, f"hydra.searchpath=[file://{tmp_path}/configs]", "+experiment=together"]
    procs = [start(*common, f"seed={seed}", tmp=tmp_path, cwd=tmp_path) for seed in (0, 1)]
    for proc in procs:
        code, out, err = finish(proc)
        assert code == 0, err
    seeds = {load_results(tmp_path / name)["config"]["seed"]
             for name in ("together", "together-2")}
    assert seeds == {0, 1}
    assert not (tmp_path / "together-3").exists()
    _, _, children = runs_of(f"sqlite:///{tmp_path}/mlflow.db")
    assert sorted(c.data.params["seed"] for c in children) == ["0", "1"]
    assert len({c.data.tags["rnnexp.result_id"] for c in children}) == 2


def sync(folder: Path, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rnnexp", "sync", str(folder)], cwd=ROOT,
                          env=env_for(tmp), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_copied_sweep_folder_is_its_own_sweep_and_a_moved_one_the_same(tmp_path):
    """Resume in a copy: the copy's folder and a parent run of its own, the original's
    untouched. Sync of a moved folder: the original's parent, nothing uploaded twice."""
    original, copy, moved = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    args = ["-m", *TINY, "seed=0,1"]
    code, out, err = finish(start(*args, f"hydra.sweep.dir={original}", tmp=tmp_path))
    assert code == 0, err
    store = f"sqlite:///{tmp_path}/mlflow.db"
    _, [parent], _ = runs_of(store)
    summary = original / "summary" / "summary.json"
    before = summary.stat().st_mtime_ns
    shutil.copytree(original, copy)

    code, out, err = finish(start(*args, f"hydra.sweep.dir={copy}", "resume=true",
                                  tmp=tmp_path))
    assert code == 0, err
    assert f"resume: 2 of 2 jobs already measured in {copy} " in " ".join(err.split())
    _, parents, children = runs_of(store)
    assert len(children) == 2  # nothing measured again
    (again,) = [p for p in parents if p.info.run_id == parent.info.run_id]
    assert (again.info.status, again.info.end_time) == ("FINISHED", parent.info.end_time)
    (of_copy,) = [p for p in parents if p.info.run_id != parent.info.run_id]
    assert of_copy.data.tags["sweep_dir"] == str(copy)
    assert of_copy.data.tags["rnnexp.sweep_id"] != parent.data.tags["rnnexp.sweep_id"]
    assert json.loads((copy / "sweep.json").read_text())["dir"] == str(copy)
    assert summary.stat().st_mtime_ns == before  # the original's folder untouched

    original.rename(moved)
    done = sync(moved, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "0 uploaded, 2 already recorded" in done.stdout
    assert len(runs_of(store)[1]) == 2  # no parent made for it: it is the original sweep


@pytest.mark.skipif(shutil.which("srun") is not None, reason="a SLURM cluster would run it "
                    "(tests/slurm: a launch the controller refuses)")
def test_a_launch_that_fails_closes_its_parent_and_compare_passes_over_it(tmp_path):
    """No SLURM here: the sweep's launch fails after its parent run was opened. The parent
    ends FAILED with the reason, and a plain compare takes the latest sweep with jobs."""
    code, out, err = finish(start("-m", *TINY, "seed=0,1", f"hydra.sweep.dir={tmp_path}/ok",
                                  tmp=tmp_path))
    assert code == 0, err
    code, out, err = finish(start("-m", "hydra/launcher=rnnexp_slurm", *TINY, "seed=0,1",
                                  f"hydra.sweep.dir={tmp_path}/slurm", tmp=tmp_path,
                                  PATH=path_without_slurm(tmp_path / "bin")))
    assert code == exit_codes.USER_ERROR
    assert len(err.strip().splitlines()) == 1 and "srun" in err
    _, parents, children = runs_of(f"sqlite:///{tmp_path}/mlflow.db")
    (failed,) = [p for p in parents if p.data.tags["sweep_dir"] == str(tmp_path / "slurm")]
    assert failed.info.status == "FAILED" and "srun" in failed.data.tags["reason"]
    compare = subprocess.run([sys.executable, "-m", "rnnexp", "compare"], cwd=ROOT,
                             env=env_for(tmp_path), capture_output=True, text=True,
                             timeout=300)
    assert compare.returncode == 0, compare.stderr
    (note,) = [ln for ln in compare.stderr.splitlines() if ln.strip()]
    assert note.startswith(f"note: left out sweep '{failed.info.run_name}': FAILED with no "
                           "job runs (the sweep stopped: RuntimeError")
    assert "seed=0,1" in compare.stdout


LOKY_TRACKER = re.compile(r"Traceback \(most recent call last\):\n"
                          r"(?:  .*\n)*?  File \".*/loky/backend/resource_tracker\.py\".*\n"
                          r"(?:  .*\n)*?KeyError: '/loky-[^']*'\n")


def without_loky_tracker(err: str) -> str:
    """stderr less loky's resource tracker's tracebacks: joblib's own helper process, killed
    with its workers, sometimes unregisters a semaphore it never saw (a known loky race,
    seen once under load) — not a traceback of rnnexp's."""
    return LOKY_TRACKER.sub("", err)


@pytest.mark.parametrize("launcher", [["hydra/launcher=rnnexp_local"],
                                      ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]])
@pytest.mark.slow
def test_sigterm_to_a_launcher_in_processes_records_its_jobs_and_ends_them(launcher,
                                                                           tmp_path):
    sweep = tmp_path / "sweep"
    proc = start("-m", *launcher, *TINY, "bench.iters=1000000", "seed=0,1",
                 f"hydra.sweep.dir={sweep}", tmp=tmp_path)
    try:
        deadline = time.monotonic() + 300
        while not all((sweep / n / ".hydra" / "config.yaml").exists() for n in "01"):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(3)  # into building, verifying, timing
        family = psutil.Process(proc.pid).children(recursive=True)
        assert family
        proc.send_signal(signal.SIGTERM)
    except BaseException:
        kill_tree(proc)
        raise
    code, out, err = finish(proc, 300)
    assert code == exit_codes.SIGTERM, err
    assert "Traceback" not in without_loky_tracker(err) and "still running" not in err, err
    if "rnnexp_local" in launcher[0]:  # joblib ends its workers itself, at once
        assert "stopping 2 job process(es)" in err
    time.sleep(1)
    alive = [p.pid for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [], "job processes left running"
    assert [load_results(sweep / n)["status"] for n in "01"] == ["interrupted"] * 2
    _, [parent], children = runs_of(f"sqlite:///{tmp_path}/mlflow.db")
    assert parent.info.status == "KILLED"
    assert sorted(c.data.params["seed"] for c in children) == ["0", "1"]
    assert all(c.info.status == "KILLED" for c in children)


def test_a_signal_while_recording_waits_for_the_record(monkeypatch):
    from rnnexp.errors import Interrupted
    from rnnexp.run import signals

    monkeypatch.setattr(signals, "PROCESS", signals.Disposition())
    before = {s: signal.getsignal(s) for s in signals.PROCESS.handled}
    signals.install()
    try:
        recorded = []
        with pytest.raises(Interrupted):
            with signals.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.1)  # the handler has run: the block goes on
                recorded.append("result")
        assert recorded == ["result"]
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_a_taken_folder_gives_the_next_free_name(tmp_path):
    from rnnexp.app import run_dir

    folder = tmp_path / "runs" / "10-00-00"
    taken = [run_dir.claim(folder, run_dir.RUN_MARKER) for _ in range(3)]
    assert [p.name for p in taken] == ["10-00-00", "10-00-00-2", "10-00-00-3"]
    assert run_dir.claim(tmp_path / "sweep", run_dir.SWEEP_MARKER) == tmp_path / "sweep"
    assert run_dir.claim(tmp_path / "sweep", run_dir.SWEEP_MARKER) == tmp_path / "sweep-2"


def test_an_interrupt_crosses_to_the_launching_process_whole():
    """A job in a launcher's worker process (joblib) raises its interrupt there; it comes
    back pickled, with its signal and whether the job had its result."""
    import pickle

    from rnnexp.errors import Interrupted, InterruptRecorded

    again = pickle.loads(pickle.dumps(InterruptRecorded(signal.SIGTERM, measured=True)))
    assert isinstance(again, InterruptRecorded) and again.signum == signal.SIGTERM
    assert again.measured and str(again) == "interrupted by SIGTERM"
    assert pickle.loads(pickle.dumps(Interrupted(signal.SIGINT))).signum == signal.SIGINT
