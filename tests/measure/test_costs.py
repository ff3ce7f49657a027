"""Peak memory per phase (rnnexp.measure.phase_memory) and start-up / compile cost with its
break-even (rnnexp.models.compile_cost): measured for real, recorded in results.json, MLflow, the
wide table and compare; older results without them still load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from rnnexp.analysis import compare_costs
from rnnexp.analysis.sweeps import Run
from rnnexp.measure import phase_memory
from rnnexp.models.compile_cost import CompileCost, break_even
from rnnexp.results.result import OK, Result
from tests.conftest import TINY, load_results

# Big enough that each phase takes fresh pages (the resident set grows in 4 KiB pages).
MEASURABLE = ["shape.hidden_size=128", "shape.input_size=128", "shape.batch_size=16"]


# --- break-even -----------------------------------------------------------------------------

def cost(build_s: float, calls_ms: list[float], steady_ms: float) -> CompileCost:
    return CompileCost(compiles=True, build_s=build_s, first_call_ms=calls_ms[0],
                       untimed_calls_ms=calls_ms, steady_ms=steady_ms)


def test_break_even_counts_start_up_beyond_steady_iterations():
    # compiled: 1 s build + calls of 2000, 10, 10 ms, then 1 ms an iteration → start-up
    # costs 1000 + 2020 − 3 = 3017 ms beyond steady ones; eager: 5 + 20 − 4 = 21 ms, 4 ms
    # an iteration. Equal at (3017 − 21) / (4 − 1) = 998.67 → from 999 on.
    compiled = cost(1.0, [2000.0, 10.0, 10.0], 1.0)
    eager = cost(0.005, [20.0], 4.0)
    assert compiled.overhead_ms == pytest.approx(3017.0)
    assert compiled.time_to_first_s == pytest.approx(3.0)
    found = break_even(compiled, eager)
    assert found.iterations == 999 and found.text() == "999 iterations"
    n = found.iterations
    assert 3017 + n * 1.0 <= 21 + n * 4.0 and 3017 + (n - 1) * 1.0 > 21 + (n - 1) * 4.0


def test_break_even_never_when_slower_per_iteration_and_at_once_when_cheaper_throughout():
    slow = cost(1.0, [500.0], 5.0)
    fast = cost(0.0, [1.0], 1.0)
    assert break_even(slow, fast).iterations is None
    assert break_even(slow, fast).text() == "never (slower per iteration)"
    assert break_even(fast, slow).iterations == 0
    assert break_even(fast, CompileCost()) is None  # the other side's numbers are missing


def synthetic(model: str, start: CompileCost) -> Run:
    result = Result(choices={"model": model, "backend": "aten"}, overrides=[],
                    config={"model": model}, status=OK, compile_cost=start)
    return Run.of(model, result)


def test_compare_reads_the_break_even_from_two_results():
    compiled = synthetic("jit", cost(1.0, [2000.0, 10.0, 10.0], 1.0))
    eager = synthetic("py", cost(0.005, [20.0], 4.0))
    assert compare_costs.break_even_cell(compiled, eager) == "999 iterations"
    assert compare_costs.break_even_cell(eager, eager) == "base"
    assert compare_costs.break_even_cell(eager, None) == "no match"


# --- memory meters ----------------------------------------------------------------------------

def test_a_gpu_job_measures_the_cuda_allocator_and_a_cpu_job_the_resident_set(tmp_path):
    meter, why = phase_memory.meter_for(torch.device("cuda", 1))
    assert isinstance(meter, phase_memory.CudaPeak) and meter.device == torch.device("cuda", 1)
    assert meter.kind == "cuda_peak_mb" and why == ""
    meter, why = phase_memory.meter_for(torch.device("cpu"))
    assert isinstance(meter, phase_memory.RssHighWater) and meter.kind == "rss_hwm_mb"
    meter, why = phase_memory.meter_for(torch.device("cpu"), platform="darwin")
    assert meter is None and "needs Linux's /proc (darwin)" in why
    # A /proc without clear_refs (a folder here): the high-water mark cannot be reset.
    (tmp_path / "clear_refs").mkdir()
    meter, why = phase_memory.meter_for(torch.device("cpu"), proc=tmp_path)
    assert meter is None and "cannot reset the resident-set high-water mark" in why
    meter, why = phase_memory.meter_for(torch.device("mps"))
    assert meter is None and "mps" in why


def test_cuda_peak_is_the_allocators_peak_above_the_phases_start(monkeypatch):
    # A simulated allocator: 100 MiB held at the start, 160 MiB at the phase's peak.
    state = {"allocated": 100 * 2 ** 20, "peak": 300 * 2 ** 20, "resets": 0}

    def reset(device):
        state["resets"] += 1
        state["peak"] = state["allocated"]

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: state["peak"])
    meter = phase_memory.CudaPeak(torch.device("cuda", 0))
    meter.begin()
    state["peak"] = 160 * 2 ** 20
    assert meter.end() == 60.0 and state["resets"] == 1


def test_the_resident_set_meter_sees_memory_a_phase_takes():
    meter, _ = phase_memory.meter_for(torch.device("cpu"))
    meter.begin()
    block = torch.ones(16 * 2 ** 20 // 4)  # 16 MiB, touched
    grown = meter.end()
    del block
    assert 15.0 <= grown < 64.0


# --- recorded for real ------------------------------------------------------------------------

@pytest.mark.slow
def test_a_forward_backward_jit_run_records_memory_start_up_and_metrics(run_here, tmp_path):
    proc = run_here(*TINY, *MEASURABLE, "model=jit", "backend=jit", "device=cpu",
                    "sinks=[json,console,mlflow]", "sinks.console.wide=true")
    assert proc.returncode == 0, proc.stderr
    result = load_results(tmp_path / "run")
    assert result["status"] == "ok", result["reason"]
    memory = result["memory"]
    assert memory["kind"] == "rss_hwm_mb"
    assert memory["forward_mb"] > 0 and memory["backward_mb"] > 0
    start = result["compile_cost"]
    assert start["compiles"] is True
    assert start["compile_s"] > 0 and start["build_s"] >= start["compile_s"]  # scripting
    # TorchScript's executor profiles and optimises over 4 untimed calls; the first one apart.
    assert len(start["untimed_calls_ms"]) == 4
    assert start["first_call_ms"] == start["untimed_calls_ms"][0] > 0
    assert start["steady_ms"] == result["phases"]["total"]["median_ms"]
    assert "peak MiB" in proc.stdout and "first s" in proc.stdout
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("rnnexp").experiment_id])
    metrics = run.data.metrics
    assert metrics["fwd/rss_hwm_mb"] == memory["forward_mb"]
    assert metrics["bwd/rss_hwm_mb"] == memory["backward_mb"]
    assert metrics["compile/compile_s"] == pytest.approx(start["compile_s"])
    assert metrics["compile/first_call_ms"] == pytest.approx(start["first_call_ms"])
    assert "compile/overhead_ms" in metrics and "compile/time_to_first_s" in metrics


def test_a_forward_only_run_has_no_backward_memory_and_an_eager_one_compiles_nothing(
        run_here, tmp_path):
    proc = run_here(*TINY, *MEASURABLE, "model=lstm", "backend=aten", "device=cpu",
                    "bench.backward=false", "sinks=[json]")
    assert proc.returncode == 0, proc.stderr
    result = load_results(tmp_path / "run")
    assert result["memory"]["forward_mb"] > 0 and result["memory"]["backward_mb"] is None
    start = result["compile_cost"]
    assert start["compiles"] is False and start["compile_s"] is None
    assert len(start["untimed_calls_ms"]) == 1 and start["steady_ms"] > 0


def test_bench_memory_false_measures_no_memory(run_here, tmp_path):
    proc = run_here(*TINY, "model=lstm", "backend=aten", "device=cpu", "bench.memory=false",
                    "sinks=[json]")
    assert proc.returncode == 0, proc.stderr
    assert load_results(tmp_path / "run")["memory"] is None


def test_results_of_earlier_versions_load_without_memory_or_start_up(run_here, tmp_path):
    proc = run_here(*TINY, "model=lstm", "backend=aten", "device=cpu", "sinks=[json]")
    assert proc.returncode == 0, proc.stderr
    data = load_results(tmp_path / "run")
    fresh = Result.from_json(data)
    assert fresh.memory.kind == "rss_hwm_mb" and fresh.compile_cost.build_s > 0
    assert Result.from_json(json.loads(json.dumps(fresh.to_json()))) == fresh
    old = {k: v for k, v in data.items() if k not in ("memory", "compile_cost")}
    old["schema"] = 2
    path = Path(tmp_path / "old.json")
    path.write_text(json.dumps(old))
    loaded = Result.load_checked(path)
    assert loaded.memory is None and loaded.compile_cost is None
    assert loaded.phase("forward").median_ms == data["phases"]["forward"]["median_ms"]


@pytest.mark.slow
def test_inductor_records_its_compile_and_compare_shows_the_break_even(run_here, tmp_path):
    # Two steps keep the unrolled loop (and the compile) short; model=jit is scripted under
    # aten and compiled from its eager form under inductor.
    proc = run_here(*TINY, "model=jit", "backend=aten,inductor", "shape.seq_len=2",
                    "device=cpu", "sinks=[json]", multirun=True)
    assert proc.returncode == 0, proc.stderr
    by_backend = {}
    for path in sorted((tmp_path / "sweep").glob("*/results.json")):
        data = json.loads(path.read_text())
        by_backend[data["choices"]["backend"]] = data
    compiled = by_backend["inductor"]
    assert compiled["status"] == "ok", compiled["reason"]
    start = compiled["compile_cost"]
    assert start["compiles"] is True and start["compile_s"] > 0
    # The first call compiled: dynamo's compile time lies inside it; then 2 more calls.
    assert start["first_call_ms"] >= 1e3 * start["compile_s"]
    assert len(start["untimed_calls_ms"]) == 3
    assert compiled["backend"]["dynamo_compile_s"] == start["compile_s"]
    assert compiled["memory"]["forward_mb"] is not None

    from rnnexp.analysis import compare, sweeps

    runs = sweeps.from_folder(tmp_path / "sweep").runs
    bases = compare.baselines_within(runs, "backend", "aten")
    cells = {r.config["backend"]: compare_costs.break_even_cell(r, b)
             for r, b in zip(runs, bases, strict=True)}
    expected = break_even(Result.from_json(compiled).compile_cost,
                          Result.from_json(by_backend["aten"]).compile_cost)
    assert cells == {"aten": "base", "inductor": expected.text()}
    shown = subprocess_compare(tmp_path)
    assert "break-even" in shown and expected.text().split(" (")[0] in shown


def subprocess_compare(tmp_path: Path) -> str:
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    proc = subprocess.run([sys.executable, "-m", "rnnexp", "compare", str(tmp_path / "sweep"),
                           "--baseline", "backend=aten", "--output", str(tmp_path / "c.png")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "250"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
