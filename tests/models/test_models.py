"""Every model builds at a tiny shape, runs, and passes verification against its reference;
verification can fail; device, dtype and option refusals are one line and come before timing.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from omegaconf import OmegaConf
from torch.utils._python_dispatch import TorchDispatchMode

from rnnexp.app.config_check import CONF_DIR, group_options
from rnnexp.config.schema import validate
from rnnexp.errors import ConfigError, RnnexpError, UnsupportedError
from rnnexp.machine.platform import Platform
from rnnexp.measure import job
from rnnexp.measure.verify import MULTIPLE, verify
from rnnexp.models.cells import GRUCell, LSTMCell
from rnnexp.models.inputs import native_rnn
from rnnexp.models.quantized import quantize
from rnnexp.models.work import GRU_POINTWISE, LAYERNORM_PER_ELEM, LSTM_POINTWISE, lstm_work
from tests.conftest import TINY, choices_of, compose_cfg

MODELS = group_options("model")
FORWARD_ONLY = {"lstm_layernorm", "quantized_lstm", "quantized_gru"}
# Read from the option files, not composed: collection stays fast.
LOOP_MODELS = [m for m in MODELS if OmegaConf.load(CONF_DIR / "model" / f"{m}.yaml")
               .get("form", "module") != "module"]


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


def bump_first(weight: torch.Tensor, by: float) -> None:
    with torch.no_grad():
        weight.view(-1)[0] += by


def swap_gate_blocks(weight: torch.Tensor, gates: int) -> None:
    """Exchange the first two gate blocks (LSTM i↔f, GRU r↔z) of a [gates·H, ·] weight."""
    n = weight.shape[0] // gates
    with torch.no_grad():
        first = weight[:n].clone()
        weight[:n] = weight[n:2 * n]
        weight[n:2 * n] = first


CORRUPTIBLE = [
    ("jit_premul_bias", 2),      # b_ih, folded into the up-front GEMM
    ("jit_gru", 1),              # w_hh
    ("jit_layernorm", 2),        # a LayerNorm weight nn.LSTM does not have
    ("vl_jit", 0),
    ("gru", 0),
    ("eltwise", 2),              # cx
]


@pytest.mark.parametrize("by", [0.5, 1e-2])
@pytest.mark.parametrize("model, param", CORRUPTIBLE)
def test_corrupted_weight_fails_verification(model, param, by):
    p, workload = build(model)
    bump_first(workload.params[param], by)
    result = verify(workload, p.spec.dtype, backward=True)
    assert result.status == "failed" and result.detail
    assert result.multiple > MULTIPLE


@pytest.mark.parametrize("model, gates", [("jit", 4), ("jit_gru", 3), ("jit_layernorm", 4)])
def test_swapped_gate_blocks_fail_verification(model, gates):
    p, workload = build(model)
    swap_gate_blocks(workload.params[0], gates)
    assert verify(workload, p.spec.dtype, backward=True).status == "failed"


def test_nan_fails_verification():
    p, workload = build("jit")
    bump_first(workload.params[1], float("nan"))
    result = verify(workload, p.spec.dtype, backward=True)
    assert result.status == "failed" and "nan" in result.detail


def build_default_shape(model: str):
    """The fastrnns default shape (seq 100, batch 64, hidden 512, input 512), forward only:
    where rounding error has grown the most, so tolerances are widest."""
    return build(model, "shape=default", "bench.backward=false")


@pytest.mark.parametrize("model, param, fault", [
    ("jit", 1, "bump"),                  # w_hh: the smallest fault measured (~50× the bound)
    ("jit_gru", 0, "bump"),
    ("jit_layernorm", 2, "bump"),        # the widest tolerance: float32 error grows fastest
    ("jit_layernorm", 0, "swap"),
])
def test_planted_faults_fail_at_the_default_shape(model, param, fault):
    p, workload = build_default_shape(model)
    if fault == "bump":
        bump_first(workload.params[param], 1e-2)
    else:
        swap_gate_blocks(workload.params[param], 4)
    result = verify(workload, p.spec.dtype, backward=False)
    assert result.status == "failed", result
    assert result.multiple > MULTIPLE


@pytest.mark.parametrize("model, dtype", [
    ("jit_layernorm", "float32"), ("jit_layernorm_decom", "float32"),
    ("jit", "bfloat16"), ("gru", "bfloat16"), ("jit_gru", "bfloat16"),
])
def test_longer_sequences_verify_against_measured_error(model, dtype):
    """At seq 50 / batch 16 / hidden 64 these are correct yet were off from float64 by more
    than the old per-dtype constants (float32 atol 1e-4, bfloat16 0.1): the tolerance must
    come from what the dtype itself achieves on the same inputs."""
    old_atol = {"float32": 1e-4, "bfloat16": 0.1}[dtype]
    p, workload = build(model, f"dtype={dtype}", "shape.seq_len=50", "shape.batch_size=16",
                        "shape.hidden_size=64")
    result = verify(workload, p.spec.dtype, backward=True)
    assert result.status == "passed", result.detail
    assert result.max_abs_error > old_atol
    assert result.reference_error > 0 and result.allowed_multiple == MULTIPLE
    assert result.error <= MULTIPLE * result.reference_error + result.floor


def test_measured_rule_records_both_errors():
    p, workload = build("jit")
    result = verify(workload, p.spec.dtype, backward=True).as_dict()
    assert result["status"] == "passed" and result["tensor"]
    assert 0 < result["error"] and 0 < result["reference_error"]
    assert result["multiple"] == pytest.approx(result["error"] / result["reference_error"])
    assert result["atol"] is None  # no constant tolerance involved


def quantize_corrupted(spec, kind: str, corrupt) -> torch.nn.Module:
    """The quantized module built from a corrupted copy of the model's float module: a fault
    in the model, not in its reference."""
    float_module = native_rnn(replace(spec, requires_grad=False), kind)
    with torch.no_grad():
        corrupt(float_module)
    return quantize(float_module, "qint8")


@pytest.mark.parametrize("model, kind, gates", [("quantized_lstm", "LSTM", 4),
                                                ("quantized_gru", "GRU", 3)])
@pytest.mark.parametrize("fault", ["swap_gates", "reversed_w_hh"])
def test_quantized_check_catches_structural_faults(model, kind, gates, fault):
    """What the absolute quantized tolerance does catch: gate blocks in the wrong order, or a
    kernel reading W_hh in the wrong order (max|Δ| 0.35-1.1 against atol 0.15). It does not
    catch one corrupted element or a 10% scale (see quantized.py)."""
    p, workload = build(model)
    corrupt = {"swap_gates": lambda m: swap_gate_blocks(m.weight_ih_l0, gates),
               "reversed_w_hh": lambda m: m.weight_hh_l0.copy_(m.weight_hh_l0.flip(1))}[fault]
    workload.forward = quantize_corrupted(p.spec, kind, corrupt)
    result = verify(workload, p.spec.dtype, backward=False)
    assert result.status == "failed" and result.max_abs_error > result.atol


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


class ElementsWritten(TorchDispatchMode):
    """Elements every aten op writes (all of its tensor outputs)."""

    def __init__(self):
        super().__init__()
        self.elements = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self.elements += sum(t.numel() for t in outs if isinstance(t, torch.Tensor))
        return out


def backward_elements(model: str, seq_len: int, *extra: str) -> int:
    _, workload = build(model, f"shape.seq_len={seq_len}", "shape.hidden_size=16", *extra)
    for _ in range(3):  # a scripted loop's profiling runs first
        workload.zero_grad()
        workload.backward(*workload.backward_setup(workload.run_forward()))
    setup = workload.backward_setup(workload.run_forward())
    workload.zero_grad()
    with ElementsWritten() as counter:
        workload.backward(*setup)
    return counter.elements


@pytest.mark.parametrize("model", ["jit_premul", "jit_premul_bias"])
def test_a_loop_s_backward_work_grows_with_seq_len_not_its_square(model):
    """Each step takes its input from one unbind, as fastrnns does: indexing the precomputed
    inputs step by step made every step's backward write a zero tensor of all steps
    (at seq 100, hidden 512 the backward took 4–5× as long)."""
    short, long = backward_elements(model, 16), backward_elements(model, 64)
    assert long < 5 * short  # linear: 4×; quadratic: about 16×
