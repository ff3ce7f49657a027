"""The core models run forward+backward at a tiny shape and pass verification against
nn.LSTM in float64; a corrupted weight makes verification fail."""

import pytest
import torch

from rnnexp import job
from rnnexp.schema import validate
from rnnexp.verify import verify
from tests.conftest import TINY, choices_of, compose_cfg


def build(model, *extra):
    cfg = compose_cfg([f"model={model}", *TINY, "device=cpu", *extra])
    planned = job.plan(validate(cfg), choices_of(cfg))
    return planned, job.build_workload(planned.cfg, planned.spec)


@pytest.mark.parametrize("model", ["lstm", "py", "jit"])
@pytest.mark.parametrize("layers", [1, 2])
def test_model_verifies_against_nn_lstm(model, layers):
    planned, workload = build(model, f"shape.num_layers={layers}")
    result = verify(workload, torch.float32, backward=True)
    assert result.status == "passed", result.detail
    assert result.max_abs_error < 1e-4
    out, (h, c) = workload.run_forward()
    s = planned.cfg.shape
    assert out.shape == (s.seq_len, s.batch_size, s.hidden_size)
    assert h.shape == c.shape == (layers, s.batch_size, s.hidden_size)


def test_jit_is_scripted_and_py_is_not():
    _, jit = build("jit", "backend=aten")
    _, py = build("py", "backend=aten")
    assert isinstance(jit.forward, torch.jit.ScriptModule)
    assert not isinstance(py.forward, torch.jit.ScriptModule)


@pytest.mark.parametrize("model", ["lstm", "jit"])
def test_corrupted_weight_fails_verification(model):
    _, workload = build(model)
    with torch.no_grad():
        workload.params[1][0, 0] += 0.5
    result = verify(workload, torch.float32, backward=True)
    assert result.status == "failed"
    assert result.max_abs_error > 1e-3
    assert result.detail


def test_execute_records_verification_and_phases():
    planned, _ = build("jit")
    result = job.execute(planned)
    assert result.status == "ok"
    assert result.verification["status"] == "passed"
    fwd, bwd = result.phases["forward"], result.phases["backward"]
    assert fwd["n"] == bwd["n"] == 3 and len(fwd["samples_ms"]) == 3
    assert fwd["median_ms"] > 0 and fwd["gflops"] > 0 and fwd["tokens_per_s"] > 0
    assert result.work["flops_bwd"] > result.work["flops_fwd"] > 0
    assert result.backend["name"] == "aten"
