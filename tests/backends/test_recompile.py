"""Compilations never pass for kernel time: a job that compiled inside its timed iterations is
`recompiled` (no rates), and dynamic_eltwise compiles once for dynamic shapes under inductor."""

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
