"""Every model builds at a tiny shape, runs, and passes verification against its reference;
verification can fail; device, dtype and option refusals are one line and come before timing.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rnnexp import job
from rnnexp.config_check import group_options
from rnnexp.errors import ConfigError, RnnexpError, UnsupportedError
from rnnexp.models.cells import GRUCell, LSTMCell
from rnnexp.models.work import GRU_POINTWISE, LAYERNORM_PER_ELEM, LSTM_POINTWISE, lstm_work
from rnnexp.platform import Platform
from rnnexp.schema import validate
from rnnexp.verify import verify
from tests.conftest import TINY, choices_of, compose_cfg

MODELS = group_options("model")
FORWARD_ONLY = {"lstm_layernorm", "quantized_lstm", "quantized_gru"}
LOOP_MODELS = [m for m in MODELS if validate(compose_cfg([f"model={m}"])).model.form != "module"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny shapes gain nothing from intra-op threads, and on a shared CPU spinning OpenMP
    workers make this file several times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def planned(model: str, *extra: str, plat: Platform | None = None) -> job.Plan:
    cfg = compose_cfg([f"model={model}", *TINY, "device=cpu", *extra])
    return job.plan(validate(cfg), choices_of(cfg), plat=plat)


def build(model: str, *extra: str):
    p = planned(model, *extra)
    return p, job.build_workload(p.cfg, p.spec)


def test_every_seed_model_has_a_config():
    expected = {"lstm", "lstm_dropout", "lstm_layernorm", "py", "jit", "jit_premul",
                "jit_premul_bias", "jit_simple", "jit_multilayer", "jit_layernorm",
                "jit_layernorm_decom", "jit_dropout", "vl_lstm", "vl_jit", "vl_py",
                "eltwise", "dynamic_eltwise", "quantized_lstm", "quantized_gru", "gru",
                "jit_gru"}
    assert expected <= set(MODELS)


@pytest.mark.parametrize("model", MODELS)
def test_model_runs_and_verifies(model):
    """Modules at one layer; loop models at two, which also proves they honour num_layers
    (upstream's jit variants silently ran layer 0 only)."""
    layers = 2 if model in LOOP_MODELS else 1
    p, workload = build(model, f"shape.num_layers={layers}")
    result = verify(workload, p.spec.dtype, backward=True)
    assert result.status == "passed", result.detail
    assert workload.has_backward == (model not in FORWARD_ONLY)
    if not workload.has_backward:
        assert workload.no_backward_reason
    else:  # the timer's own step: forward, seeded backward, gradients on every parameter
        workload.zero_grad()
        workload.backward(*workload.backward_setup(workload.run_forward()))
        assert workload.params and all(t.grad is not None for t in workload.params)
    w = workload.work
    assert w.flops_fwd > 0 and w.bytes_fwd > 0 and w.tokens > 0
    assert (w.flops_bwd > 0) == workload.has_backward
    if p.cfg.model.family != "eltwise":
        out = workload.run_forward()
        states = out if model == "jit_simple" else out[1]
        states = [states] if isinstance(states, torch.Tensor) else states
        assert all(s.shape[0] == layers for s in states)


def test_script_follows_form_and_spec():
    for model, scripted in [("jit", True), ("jit_gru", True), ("eltwise", True),
                            ("py", False), ("vl_py", False)]:
        _, workload = build(model)
        assert isinstance(workload.forward, torch.jit.ScriptModule) == scripted, model


@pytest.mark.parametrize("model, param", [
    ("jit_premul_bias", 2),      # b_ih, folded into the up-front GEMM
    ("jit_gru", 1),              # w_hh
    ("jit_layernorm", 2),        # a LayerNorm weight nn.LSTM does not have
    ("vl_jit", 0),
    ("gru", 0),
    ("eltwise", 2),              # cx
])
def test_corrupted_weight_fails_verification(model, param):
    p, workload = build(model)
    with torch.no_grad():
        workload.params[param].view(-1)[0] += 0.5
    result = verify(workload, p.spec.dtype, backward=True)
    assert result.status == "failed" and result.detail
    assert result.max_abs_error > 1e-3


def test_quantized_wrong_kernel_would_fail_its_tolerance():
    """The quantized tolerance is loose but not vacuous: corrupting the float model behind it
    by a clear amount fails."""
    p, workload = build("quantized_lstm")
    reference = workload.reference

    def corrupted():
        ref = reference()
        with torch.no_grad():
            ref.params[1].mul_(1.5)
        return ref

    workload.reference = corrupted
    assert verify(workload, p.spec.dtype, backward=False).status == "failed"


def test_varlen_lengths_are_seeded_and_inclusive():
    _, a = build("vl_py", "shape.min_len=3", "shape.max_len=4", "shape.batch_size=64")
    _, b = build("vl_py", "shape.min_len=3", "shape.max_len=4", "shape.batch_size=64")
    lengths = [len(s) for s in a.inputs[0]]
    assert lengths == [len(s) for s in b.inputs[0]]
    assert set(lengths) == {3, 4}
    assert a.work.tokens == sum(lengths)


def test_dropout_models_drop_when_timed_and_verify_without():
    for model in ("lstm_dropout", "jit_dropout"):
        p, workload = build(model, "shape.num_layers=2")
        first, second = workload.run_forward()[0], workload.run_forward()[0]
        assert not torch.equal(first, second), f"{model}: dropout inactive in training mode"
        result = verify(workload, p.spec.dtype, backward=True)
        assert result.status == "passed" and "dropout off" in result.detail


def test_dynamic_eltwise_changes_sizes_every_iteration():
    _, workload = build("dynamic_eltwise", "shape.batch_size=32", "shape.hidden_size=64")
    shapes = {tuple(workload.run_forward()[0].shape) for _ in range(6)}
    assert len(shapes) > 1
    assert all(32 / 1.2 - 1 <= b <= 32 and 64 / 1.2 - 1 <= h <= 64 for b, h in shapes)


def test_eltwise_bytes_are_counted_once():
    p, workload = build("eltwise")
    b, h = p.cfg.shape.batch_size, p.cfg.shape.hidden_size
    # 4 inputs of [b, 4h] and cx read, hy and cy written, 4 bytes each — not × 4 again.
    assert workload.work.bytes_fwd == (4 * 4 * b * h + b * h + 2 * b * h) * 4


FAKE_GPU = Platform(torch_version=torch.__version__, cuda_version="13.0", gpu_count=1,
                    gpu_names=("Fake GPU",), cpu_name="cpu")


@pytest.mark.parametrize("model", ["quantized_lstm", "quantized_gru"])
def test_quantized_on_gpu_is_refused_before_timing(model):
    cfg = compose_cfg([f"model={model}", *TINY, "device=cuda", "backend=aten"])
    with pytest.raises(UnsupportedError) as err:
        job.plan(validate(cfg), choices_of(cfg), plat=FAKE_GPU)
    assert str(err.value) == (f"model={model} runs on the CPU only; device is cuda:0 "
                              "— use device=cpu")


def test_quantized_float16_weights_verify():
    p, workload = build("quantized_gru", "model.build.weight_dtype=float16")
    result = verify(workload, p.spec.dtype, backward=False)
    assert result.status == "passed" and result.atol == 5e-3


def test_bad_weight_dtype_is_one_line():
    with pytest.raises(ConfigError) as err:
        build("quantized_lstm", "model.build.weight_dtype=int4")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("model.build.weight_dtype:")
    assert "qint8" in msg and "float16" in msg


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_on_cpu(dtype):
    with pytest.raises(UnsupportedError) as err:
        planned("quantized_lstm", f"dtype={dtype}")
    assert str(err.value) == (f"dtype={dtype}: model=quantized_lstm supports float32 only "
                              "— use dtype=float32")
    for model in ("lstm", "jit", "jit_gru", "eltwise", "jit_layernorm"):
        p, workload = build(model, f"dtype={dtype}")
        out = workload.run_forward()
        assert (out[0] if isinstance(out, tuple) else out).dtype == getattr(torch, dtype)
        result = verify(workload, p.spec.dtype, backward=True)
        assert result.status == "passed", (model, result.detail)


def test_unknown_cell_is_one_line():
    with pytest.raises(RnnexpError) as err:
        build("jit", "model.build.cell=nope")
    assert str(err.value).startswith("model.build.cell: 'nope' is not a known cell")


class ElementCounter(TorchDispatchMode):
    """Counts, per aten op, the elements it writes (pointwise ops) or normalises
    (native_layer_norm): an independent recount of what the work constants claim."""

    def __init__(self):
        super().__init__()
        self.pointwise = 0
        self.layer_norm = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.native_layer_norm.default:
            self.layer_norm += args[0].numel()
        elif torch.Tag.pointwise in func.tags:
            self.pointwise += out.numel()
        return out


@pytest.mark.parametrize("cell, constant", [(LSTMCell, LSTM_POINTWISE),
                                            (GRUCell, GRU_POINTWISE)])
def test_pointwise_flops_match_the_cells_ops(cell, constant):
    """One step's pointwise elements per hidden unit (each op writing B·H or B·kH elements,
    sigmoid/tanh counted as 1) is the constant the FLOP count uses."""
    B, H, gates = 3, 5, 4 if cell is LSTMCell else 3
    step = cell(*(torch.randn(s) for s in [(gates * H, 7), (gates * H, H), (gates * H,),
                                          (gates * H,)]))
    state = [torch.randn(B, H) for _ in range(2 if cell is LSTMCell else 1)]
    with torch.no_grad(), ElementCounter() as counter:
        step.step(torch.randn(B, 7), state)
    assert counter.pointwise == constant * B * H


def test_layernorm_tail_work_counts_every_layers_c_n():
    p, workload = build("lstm_layernorm", "shape.num_layers=3")
    with torch.no_grad(), ElementCounter() as counter:
        workload.run_forward()
    lstm_flops = lstm_work(p.cfg.shape, 4).flops_fwd
    assert workload.work.flops_fwd - lstm_flops == LAYERNORM_PER_ELEM * counter.layer_norm
