"""Device peaks and every result placed against them: the cache, the arithmetic, results.json,
the table, MLflow and the roofline chart of a sweep. Real measurements, real sweeps, a real
MLflow store; no assertion on how fast anything is."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from rich.console import Console

from rnnexp.analysis import roofline_chart, sweeps
from rnnexp.app.commands import run_command
from rnnexp.app.config_check import check
from rnnexp.errors import RnnexpError
from rnnexp.measure.records import Samples, Verification
from rnnexp.models.work import Work
from rnnexp.results import cache as cache_folder
from rnnexp.results.report import percent, results_table
from rnnexp.results.result import INVALID, OK, Result, phase_stats
from rnnexp.results.sinks.mlflow import runs, store
from rnnexp.run import roofline
from tests.conftest import TINY, load_results, rnnexp_here

CPU = torch.device("cpu")
# 3 GFLOP and 3 MB per forward+backward: at 3 ms that is 1000 GFLOP/s, 1 GB/s, 1000 FLOP/B.
WORK = Work(flops_fwd=1e9, flops_bwd=2e9, bytes_fwd=1e6, bytes_bwd=2e6, tokens=1000)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache of this test's own, and a count of the (real, shortened) measurements."""
    monkeypatch.setenv(cache_folder.CACHE_ENV, str(tmp_path / "cache"))
    # Shorter budgets and a smaller copy: the tests decide on the cache, not on the numbers.
    monkeypatch.setattr(roofline, "MIN_RUN_TIME_S", 0.05)
    monkeypatch.setattr(roofline, "CALIBRATE_S", 0.01)
    monkeypatch.setattr(roofline, "COPY_BYTES", {"cpu": 8 * 2**20})
    # The machine's load decides whether cached peaks are taken again: a quiet one here,
    # whatever else this shared machine runs (the busy case sets its own).
    monkeypatch.setattr(roofline, "current_load", lambda: 0.0)
    calls = []
    real = roofline.measure

    def counted(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(roofline, "measure", counted)
    return tmp_path / "cache" / "roofline", calls


def result_of(samples: Samples, status: str = OK) -> Result:
    return Result(choices={"model": "jit", "backend": "aten", "shape": "small"}, overrides=[],
                  config={}, status=status, device="cpu", device_name="test cpu",
                  dtype="float32",
                  verification=Verification("passed" if status == OK else "failed", 0.5),
                  phases=phase_stats(samples, WORK))


FWD_BWD = Samples(forward_ms=[1.0, 1.0, 1.0], backward_ms=[2.0, 2.0, 2.0])
PEAKS = roofline.Peaks(gflops=4000.0, gbps=2.0, gemm_n=1024, copy_bytes=2**28,
                       measured_at="2026-11-23T10:00:00+00:00", load_1min=0.5)


# --- the cache -----------------------------------------------------------------------------

def test_peaks_are_measured_once_then_read_from_the_cache(cache, capsys):
    folder, calls = cache
    first = roofline.peaks(CPU, "test cpu", "float32", 1)
    files = list(folder.glob("*.json"))
    assert len(files) == 1 and len(calls) == 1
    mtime = files[0].stat().st_mtime_ns
    err = capsys.readouterr().err
    assert err.count("roofline: measuring GEMM and copy peaks of test cpu (cpu, float32, "
                     "1 thread) once") == 1 and str(files[0]) in err
    assert first.gflops > 0 and first.gbps > 0 and first.copy_bytes == 8 * 2**20
    assert roofline.GEMM_START_N <= first.gemm_n <= roofline.GEMM_MAX_N

    again = roofline.peaks(CPU, "test cpu", "float32", 1)
    assert again == first and len(calls) == 1
    assert files[0].stat().st_mtime_ns == mtime
    assert "measuring" not in capsys.readouterr().err
    saved = json.loads(files[0].read_text())
    assert saved["key"]["torch"] == torch.__version__ and saved["key"]["threads"] == 1
    assert saved["peaks"]["gflops"] == first.gflops


def test_another_dtype_or_thread_count_measures_again(cache):
    folder, calls = cache
    for dtype, threads in (("float32", 1), ("bfloat16", 1), ("float32", 2)):
        roofline.peaks(CPU, "test cpu", dtype, threads)
    assert len(calls) == 3 and len(list(folder.glob("*.json"))) == 3
    assert len(list(folder.glob("*-bfloat16-*.json"))) == 1
    assert [(c[1], c[2]) for c in calls] == [(torch.float32, 1), (torch.bfloat16, 1),
                                             (torch.float32, 2)]
    for dtype, threads in (("float32", 1), ("bfloat16", 1), ("float32", 2)):
        roofline.peaks(CPU, "test cpu", dtype, threads)
    assert len(calls) == 3


def test_peaks_taken_busy_are_measured_again_once_the_machine_is_quiet(cache, monkeypatch,
                                                                        capsys):
    folder, calls = cache
    cpus = os.cpu_count() or 1
    monkeypatch.setattr(roofline, "current_load", lambda: 2.0 * cpus)  # busy
    roofline.peaks(CPU, "test cpu", "float32", 1)
    assert "busy" in capsys.readouterr().err
    roofline.peaks(CPU, "test cpu", "float32", 1)
    assert len(calls) == 1  # still busy: measuring again would not be better
    monkeypatch.setattr(roofline, "current_load", lambda: 0.1)  # quiet
    roofline.peaks(CPU, "test cpu", "float32", 1)
    assert len(calls) == 2
    assert "again: the cached ones were taken on a busy machine" in capsys.readouterr().err
    roofline.peaks(CPU, "test cpu", "float32", 1)
    assert len(calls) == 2  # taken quiet: kept
    saved = json.loads(next(folder.glob("*.json")).read_text())
    assert saved["peaks"]["load_1min"] == 0.1


def test_the_key_holds_device_and_library_versions():
    key = roofline.Key.of(CPU, "test cpu", "float32", 4)
    assert (key.torch, key.threads, key.device_type) == (torch.__version__, 4, "cpu")
    assert key.accelerator == (torch.version.cuda or getattr(torch.version, "hip", None) or "")
    names = {roofline.Key.of(CPU, name, dtype, threads).filename()
             for name in ("test cpu", "other cpu") for dtype in ("float32", "float16")
             for threads in (1, 2)}
    assert len(names) == 8
    # A GPU ignores host threads; another torch or method is another measurement.
    gpu = roofline.Key.of(torch.device("cuda", 1), "GPU X", "float16", 16)
    assert gpu.threads == 0 and gpu.filename() == roofline.Key.of(
        torch.device("cuda", 0), "GPU X", "float16", 2).filename()
    assert roofline.Key(**{**key.__dict__, "torch": "0.0"}).filename() != key.filename()
    assert roofline.Key(**{**key.__dict__, "method": 99}).filename() != key.filename()


def test_a_stale_or_broken_cache_file_is_measured_again(cache):
    folder, calls = cache
    roofline.peaks(CPU, "test cpu", "float32", 1)
    path = next(folder.glob("*.json"))
    data = json.loads(path.read_text())
    data["key"]["torch"] = "0.0"  # written by another torch under the same name
    path.write_text(json.dumps(data))
    roofline.peaks(CPU, "test cpu", "float32", 1)
    assert len(calls) == 2 and json.loads(path.read_text())["key"]["torch"] == torch.__version__
    path.write_text("{half a file")
    roofline.peaks(CPU, "test cpu", "float32", 1)
    assert len(calls) == 3 and "peaks" in json.loads(path.read_text())
    roofline.peaks(CPU, "test cpu", "float32", 1, remeasure=True)
    assert len(calls) == 4


def test_an_unwritable_cache_still_gives_peaks(cache, monkeypatch, capsys):
    _, calls = cache
    blocker = Path(os.environ[cache_folder.CACHE_ENV])
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("a file where the cache folder would be")
    assert roofline.peaks(CPU, "test cpu", "float32", 1).gflops > 0
    assert len(calls) == 1 and "not writable" in capsys.readouterr().err


def test_a_failed_measurement_keeps_the_result(cache, monkeypatch, capsys):
    """Simulates a GPU without room for the measurement's tensors."""
    def out_of_memory(*args):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB\nmore")

    monkeypatch.setattr(roofline, "_gemm", out_of_memory)
    r = result_of(FWD_BWD)
    r.timing = None
    assert roofline.of_result(r) is None
    assert capsys.readouterr().err.strip().endswith(
        "roofline: could not measure the peaks of cpu (CUDA out of memory. Tried to allocate "
        "1.00 GiB); the result is recorded without its roofline")


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(cache_folder.CACHE_ENV, str(tmp_path / "here"))
    assert cache_folder.cache_dir() == tmp_path / "here"
    monkeypatch.delenv(cache_folder.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder.cache_dir() == tmp_path / "xdg" / "rnnexp"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_folder.cache_dir() == Path.home() / ".cache" / "rnnexp"


# --- a result against the peaks ------------------------------------------------------------

def test_placement_is_the_rates_over_the_peaks():
    r = result_of(FWD_BWD)
    roof = roofline.place(r, PEAKS)
    total = r.phase("total")
    assert roof.phase == "total" and total.gflops == pytest.approx(1000)
    assert roof.intensity == pytest.approx(1000)  # 3e9 FLOP / 3e6 B
    assert roof.pct_peak_flops == pytest.approx(100 * total.gflops / PEAKS.gflops) == 25
    assert roof.pct_peak_bandwidth == pytest.approx(100 * total.gbps / PEAKS.gbps) == 50
    # At 1000 FLOP/B the 2 GB/s roof (2000 GFLOP/s) is below the 4000 GFLOP/s one.
    assert roof.bound == "memory" and roof.pct_attainable == pytest.approx(50)
    compute = roofline.place(r, roofline.Peaks(1500.0, 10.0, 1024, 2**28, ""))
    assert compute.bound == "compute" and compute.pct_attainable == pytest.approx(100 / 1.5)
    assert roof.peaks_measured_at == PEAKS.measured_at


def test_forward_only_and_untimed_results():
    fwd = roofline.place(result_of(Samples(forward_ms=[1.0, 1.0, 1.0])), PEAKS)
    assert fwd.phase == "forward" and fwd.intensity == pytest.approx(1000)
    assert fwd.pct_peak_flops == pytest.approx(100 * 1000 / PEAKS.gflops)
    untimed = Result(choices={}, overrides=[], config={}, status="unsupported")
    assert roofline.place(untimed, PEAKS) is None and roofline.of_result(untimed) is None


def test_results_json_round_trip_and_old_files_load(tmp_path):
    r = result_of(FWD_BWD)
    r.roofline = roofline.place(r, PEAKS)
    back = Result.load(r.save(tmp_path))
    assert back.roofline == r.roofline
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["roofline"]["pct_peak_flops"] == pytest.approx(25)
    del data["roofline"]  # written before results had a roofline
    assert Result.from_json(data).roofline is None
    data["schema"] = 1
    assert Result.from_json(data).phase("total").gflops == pytest.approx(1000)
    assert result_of(FWD_BWD).to_json()["roofline"] is None


def render(*results: Result) -> str:
    console = Console(record=True, width=250)
    console.print(results_table(results))
    return console.export_text()


def test_table_shows_percent_of_peak_for_valid_results_only():
    r = result_of(FWD_BWD)
    r.roofline = roofline.place(r, PEAKS)
    assert "% peak" in render(r)
    assert "25% · 50%" in render(r)
    low = result_of(FWD_BWD)
    low.roofline = roofline.place(low, roofline.Peaks(4e5, 2e3, 1024, 2**28, ""))
    assert "0.25% · 0.05%" in render(low)
    invalid = result_of(FWD_BWD, INVALID)
    invalid.roofline = roofline.place(invalid, PEAKS)
    assert "25%" not in render(invalid)


def test_mlflow_metrics_carry_the_roofline():
    r = result_of(FWD_BWD)
    assert not any(k.startswith("roofline/") for k in runs.metrics_of(r))
    r.roofline = roofline.place(r, PEAKS)
    m = runs.metrics_of(r)
    assert m["roofline/pct_peak_flops"] == m["pct_peak_flops"] == pytest.approx(25)
    assert m["roofline/pct_peak_bandwidth"] == m["pct_peak_bandwidth"] == pytest.approx(50)
    assert m["roofline/intensity"] == pytest.approx(1000)
    assert (m["roofline/peak_gflops"], m["roofline/peak_gbps"]) == (4000.0, 2.0)
    assert m["roofline/gflops"] == m["total/gflops"]


def test_the_switch_is_a_typed_bool():
    assert check(["bench=quick"], multirun=False)[0].bench.roofline is True
    assert check(["bench.roofline=false"], multirun=False)[0].bench.roofline is False
    with pytest.raises(RnnexpError, match=r"^bench\.roofline: 'maybe' is not true or false"):
        check(["bench.roofline=maybe"], multirun=False)


# --- end to end ----------------------------------------------------------------------------

def cached_peaks(folder: Path, dtype: str) -> list[dict]:
    files = [json.loads(p.read_text()) for p in (folder / "roofline").glob("*.json")]
    return [f for f in files if f["key"]["dtype"] == dtype]


@pytest.mark.slow
def test_a_run_shows_its_percent_of_measured_peak(run_here, tmp_path, roofline_cache):
    proc = run_here(*TINY, "model=gru", "backend=aten", "sinks=[json,console]")
    assert proc.returncode == 0, proc.stderr
    data = load_results(tmp_path / "run")
    roof, total = data["roofline"], data["phases"]["total"]
    assert "% peak" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if "│ gru" in line)
    assert f"{percent(roof['pct_peak_flops'])} · {percent(roof['pct_peak_bandwidth'])}" in row
    assert roof["phase"] == "total" and roof["gflops"] == total["gflops"]
    assert 0 < roof["pct_peak_flops"] and 0 < roof["pct_peak_bandwidth"]
    assert math.isclose(roof["pct_peak_flops"], 100 * total["gflops"] / roof["peak_gflops"])
    assert math.isclose(roof["pct_peak_bandwidth"], 100 * total["gbps"] / roof["peak_gbps"])
    assert math.isclose(roof["intensity"], total["gflops"] / total["gbps"])
    # The peaks are those cached for this device, dtype and thread count.
    mine = [f for f in cached_peaks(roofline_cache, "float32")
            if f["key"]["threads"] == data["timing"]["threads"]]
    assert len(mine) == 1 and mine[0]["peaks"]["gflops"] == roof["peak_gflops"]
    assert mine[0]["peaks"]["measured_at"] == roof["peaks_measured_at"]


@pytest.mark.slow
def test_the_switch_leaves_the_roofline_out(run_cli, tmp_path):
    empty = tmp_path / "empty-cache"
    proc = run_cli(*TINY, "model=gru", "backend=aten", "sinks=[json,console]",
                   "bench.roofline=false", env={cache_folder.CACHE_ENV: str(empty)})
    assert proc.returncode == 0, proc.stderr
    assert load_results(tmp_path / "run")["roofline"] is None
    assert not (empty / "roofline").exists() and "measuring" not in proc.stderr


@pytest.fixture(scope="module")
def roofline_sweep(tmp_path_factory):
    """Two models × two dtypes recorded in a fresh store: four points, two pairs of ceilings."""
    tmp = tmp_path_factory.mktemp("roofline-sweep")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    proc = rnnexp_here("-m", "model=lstm,gru", "dtype=float32,bfloat16", "backend=aten", *TINY,
                       f"sinks.mlflow.uri={uri}", f"hydra.sweep.dir={tmp}/sweep", store=uri)
    assert proc.returncode == 0, proc.stderr
    return tmp, uri


@pytest.mark.slow
def test_sweep_runs_carry_the_roofline_in_mlflow(roofline_sweep):
    tmp, uri = roofline_sweep
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rnnexp")
    jobs = [r for r in client.search_runs([exp.experiment_id])
            if r.data.tags.get(runs.TAG_KIND) == "job"]
    assert len(jobs) == 4
    for run in jobs:
        folder = next(p.parent for p in (tmp / "sweep").rglob("results.json")
                      if load_results(p.parent)["choices"]["model"] == run.data.params["model"]
                      and load_results(p.parent)["dtype"] == run.data.params["dtype"])
        roof = load_results(folder)["roofline"]
        for key in ("pct_peak_flops", "pct_peak_bandwidth", "intensity", "peak_gflops",
                    "peak_gbps", "pct_attainable"):
            assert run.data.metrics[f"roofline/{key}"] == pytest.approx(roof[key]), key


@pytest.mark.slow
def test_compare_draws_the_roofline_of_a_sweep(roofline_sweep, tmp_path, capsys):
    tmp, uri = roofline_sweep
    rc = run_command("compare", ["--roofline", "--tracking-uri", uri, "--output",
                       str(tmp_path / "chart.png")])
    out = capsys.readouterr().out
    assert rc == 0, out
    png = tmp / "sweep" / "summary" / "roofline.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and f"roofline: {png} (4 jobs" in out
    client = MlflowClient(uri)
    exp_id = client.get_experiment_by_name("rnnexp").experiment_id
    parent = sweeps.find_parent(client, exp_id, None)
    assert "compare/roofline.png" in {a.path for a in client.list_artifacts(
        parent.info.run_id, "compare")}

    # One point per job at its recorded intensity and GFLOP/s; one pair of ceilings per dtype.
    pts, missing = roofline_chart.points(sweeps.from_store(client, exp_id, None).runs,
                                         ["model"])
    assert missing == 0 and len(pts) == 4
    # The sweep's folder gives the same points as its MLflow runs.
    assert sorted(roofline_chart.points(sweeps.from_folder(tmp / "sweep").runs, ["model"])[0],
                  key=str) == sorted(pts, key=str)
    recorded = {(d["choices"]["model"], d["dtype"]): d["roofline"]
                for d in map(load_results, {p.parent for p in (tmp / "sweep").rglob(
                    "results.json")})}
    for p in pts:
        model, dtype = p.label, p.where.split()[-1]  # dtype is no config group: in `where`
        assert (p.intensity, p.gflops) == (pytest.approx(recorded[model, dtype]["intensity"]),
                                           pytest.approx(recorded[model, dtype]["gflops"]))
    assert len({(p.where, p.peak_gflops, p.peak_gbps) for p in pts}) == 2


@pytest.mark.slow
def test_compare_roofline_without_roofline_metrics_is_one_line(roofline_sweep, tmp_path,
                                                                capsys):
    """A sweep recorded without the roofline (bench.roofline=false, or an older rnnexp)."""
    tmp, _ = roofline_sweep
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client, exp_id = store.connect(uri, "rnnexp")
    folder = next((tmp / "sweep").rglob("results.json")).parent
    old = Result.load(folder / "results.json")
    old.roofline = None
    job = tmp_path / "job"
    job.mkdir()
    old.save(job)
    from rnnexp.results.sinks import Sweep

    parent = runs.open_parent(client, exp_id, Sweep(dir=str(tmp_path), name="old"), "")
    runs.log_result(client, exp_id, old, job, parent_run_id=parent)
    rc = run_command("compare", ["--roofline", "--tracking-uri", uri, "--output",
                       str(tmp_path / "chart.png")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip() == ("error: --roofline: no timed job of this sweep carries roofline "
                           "metrics — record it with bench.roofline=true (the default)")
    assert not (tmp_path / "summary" / "roofline.png").exists()


def test_the_estimate_is_stretched_by_what_the_machines_load_takes_of_its_cores():
    from rnnexp.run import estimate

    # A load of 13 on 2 cores (this process among them): 12 others and 2 threads on 2 cores.
    assert estimate.slower_by(13.0, threads=2, cores=2) == (7.0, 12.0)
    assert estimate.slower_by(1.0, threads=2, cores=2) == (1.0, 0.0)  # only this process
    assert estimate.slower_by(3.0, threads=2, cores=8) == (1.0, 2.0)  # room to spare
    busy = estimate.Estimate(seconds=420, iterations=110, gflop=80.7, peak_gflops=148,
                             slower=7.0, others=12.0, cores=2)
    assert busy.line() == (
        "estimate: ~7 min here — 110 iterations of 80.7 GFLOP at this device's measured 148 "
        "GFLOP/s (60 s), ×7.0 as other processes keep ~12 of 2 cores busy; shape=small "
        "bench=quick takes seconds")
    idle = estimate.Estimate(seconds=60, iterations=110, gflop=80.7, peak_gflops=148)
    assert idle.line().startswith("estimate: ~60 s here — 110 iterations") and \
        "longer if the machine gets busy" in idle.line()
    assert estimate.duration(9000) == "2.5 h"


def test_a_long_run_says_how_long_before_it_starts(cache, capsys):
    """fastrnns' default shape: 350 iterations (10 warm-up in each of 5 processes, 300 timed
    between them) of ~81 GFLOP (forward+backward) at the GEMM peak; the small shape is below
    the line worth saying."""
    from rnnexp.app import cli
    from rnnexp.measure import job
    from rnnexp.run import estimate

    _, calls = cache
    default = job.plan(check([], multirun=False)[0], {"model": "lstm", "backend": "auto"})
    found = estimate.of_plan(default)  # measures the peaks (the run needs them anyway)
    capsys.readouterr()
    assert found.iterations == 350 and found.gflop == pytest.approx(80.7, rel=0.01)
    assert found.seconds == pytest.approx(350 * found.gflop / found.peak_gflops * found.slower,
                                          rel=0.01) and found.slower >= 1
    cli.say_how_long(default)
    line = capsys.readouterr().err
    if found.seconds >= estimate.WORTH_SAYING_S:
        assert line.startswith(f"estimate: ~{estimate.duration(found.seconds)} here — 350 "
                               "iterations")
    small = job.plan(check(["shape=small"], multirun=False)[0], {"model": "lstm"})
    assert estimate.of_plan(small).seconds < estimate.WORTH_SAYING_S
    cli.say_how_long(small)
    assert capsys.readouterr().err == ""
    assert len(calls) == 1  # the peaks the run records anyway, measured once


def test_roofline_points_are_named_by_the_config_fields_that_vary():
    """A shape sweep: the points differ in shape.hidden_size, a field, not a group choice."""
    found = []
    for hidden in (32, 256):
        r = result_of(FWD_BWD)
        r.config = {"shape": {"hidden_size": hidden}}
        r.roofline = roofline.place(r, PEAKS)
        found.append(sweeps.Run.of(str(hidden), r))
    pts, _ = roofline_chart.points(found, ["model", "shape.hidden_size"])
    assert [p.label for p in pts] == ["jit·32", "jit·256"]
