"""Compilations never pass for kernel time: a job that compiled inside its timed iterations is
`recompiled` (no rates), and dynamic_eltwise compiles once for dynamic shapes under inductor."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from rnnexp.app.config_check import check
from rnnexp.backends.scripting import UNFUSED, ScriptedRun
from rnnexp.measure import job
from rnnexp.models.workload import Work, Workload
from rnnexp.results.result import OK, RECOMPILED, Result
from rnnexp.run import execution
from tests.conftest import TINY, load_results


def _execute(overrides: list[str], choices: dict[str, str]) -> Result:
    (cfg,) = check(overrides, multirun=False)
    return execution.execute(job.plan(cfg, choices, overrides))


@pytest.mark.slow
def test_a_compile_per_new_size_is_marked_recompiled_without_rates():
    # Static compilation of a model whose sizes change every call: sample 3 of the timed
    # iterations meets a size not compiled during warm-up.
    overrides = [*TINY, "model=dynamic_eltwise", "backend=inductor", "device=cpu",
                 "model.build.dynamic_shapes=false", "bench.iters=6"]
    result = _execute(overrides, {"model": "dynamic_eltwise", "backend": "inductor"})
    assert result.status == RECOMPILED
    assert "compiled inside the timed iterations" in result.reason
    assert "size mismatch" in result.reason  # dynamo's failed guard says why
    assert result.backend.details["timed_compiles"]["frames"] >= 1
    for name in ("forward", "backward", "total"):
        phase = result.phases[name]
        assert phase.samples_ms and phase.tokens_per_s is None and phase.gflops is None


@pytest.mark.slow
def test_dynamic_eltwise_compiles_for_dynamic_shapes_and_times_no_compile(run_here, tmp_path):
    proc = run_here(*TINY, "model=dynamic_eltwise", "backend=inductor", "device=cpu",
                    "bench.iters=10", "sinks=[json,console]")
    assert proc.returncode == 0, proc.stderr
    data = load_results(tmp_path / "run")
    assert data["status"] == OK, data["reason"]
    assert data["backend"]["dynamic"] is True and data["backend"]["graphs"] == 1
    assert "timed_compiles" not in data["backend"]
    assert data["phases"]["total"]["tokens_per_s"] > 0


def test_torchscript_plan_is_unchanged_over_a_steady_timed_loop():
    overrides = [*TINY, "model=jit", "backend=aten", "device=cpu"]
    result = _execute(overrides, {"model": "jit", "backend": "aten"})
    assert result.status == OK and result.reason == ""


OPTIMISED = "Optimized Graph:"  # what TorchScript's executor logs each time it optimises a graph

AFTER_BUILD = textwrap.dedent("""
    import sys
    from rnnexp.app.config_check import check
    from rnnexp.config import schema
    from rnnexp.measure import job
    from rnnexp.measure.measurer import Measurer
    overrides = sys.argv[2:]
    schema.register(with_deepbench=False)
    (cfg,) = check(overrides, multirun=False)
    measurer = Measurer(job.plan(cfg, {"model": sys.argv[1], "backend": "aten"}, overrides),
                        verify_model=False)
    measurer.build(one_thread=True)
    print("=== built", file=sys.stderr, flush=True)
    measurer.warm()
    measurer.round(2, 1)
""")


@pytest.mark.parametrize("model", ["jit_premul", "jit_gru"])
def test_a_scripted_loop_is_optimised_before_warm_up(model):
    """The backend's untimed runs leave nothing for TorchScript's nested executors to
    optimise: warm-up (one worker at a time, on the timed threads) and the timed rounds
    compile nothing. Seen in the executor's own log, not in timings."""
    overrides = [f"model={model}", "backend=aten", "device=cpu", "shape=small",
                 "bench.warmup=2"]
    proc = subprocess.run([sys.executable, "-c", AFTER_BUILD, model, *overrides],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ,
                               "PYTORCH_JIT_LOG_LEVEL": ">>profiling_graph_executor_impl"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    building, _, after = proc.stderr.partition("=== built")
    assert after, proc.stderr[-2000:]
    assert building.count(OPTIMISED) >= 3  # the log is on: the forward's, nested ones
    assert after.count(OPTIMISED) == 0


def test_a_changed_torchscript_plan_while_timed_is_reported():
    """What TorchScript shows of its plan: a different optimised graph run after warm-up (here
    the module runs under no_grad, a path its warm-up never took) is reported."""
    module = torch.jit.script(Tail())
    x = torch.rand(4, 3, requires_grad=True)
    workload = Workload(inputs=(x,), params=[x], forward=module, work=Work(1, 1, 1, 1, 1),
                        modules=(module,))
    run = ScriptedRun(UNFUSED)
    with run.context():
        for _ in range(ScriptedRun.RUNS):
            module(x).sum().backward()
        run.timed_start(workload)
        module(x).sum().backward()
        assert run.timed_changes(workload) == ""  # the same plan as in warm-up
        with torch.no_grad():
            module(x)
        assert "optimised graph changed" in run.timed_changes(workload)


class Tail(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x) * x + 1
