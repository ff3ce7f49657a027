"""Dynamic-quantized nn.LSTM / nn.GRU (torch.ao.nn.quantized.dynamic): weights stored as
qint8 or float16, activations float32, CPU kernels only (FBGEMM/x86/oneDNN), inference only.

torch.ao.quantization is deprecated in favour of torchao, which has no dynamic-quantized
RNN; the import is guarded so a PyTorch without it gets a one-line refusal.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import torch
from torch import nn

from rnnexp.errors import ConfigError, UnsupportedError
from rnnexp.models.inputs import REFERENCE_DTYPE, module_inputs, native_rnn, reference_spec
from rnnexp.models.native import native
from rnnexp.models.work import quantized_work
from rnnexp.models.workload import Workload, WorkloadSpec, module_workload

# (atol, rtol) against the float model in float64: absolute, not the measured rule of
# verify.py, because quantization error is systematic, not rounding noise (a float32 reference
# says nothing about it), and its worst element grows with the input width. Measured max|Δ|
# (seeds 0 and 3, 1-3 layers): qint8 1.2e-2..1.9e-2 at shape=small, 3.7e-2 (LSTM) and 5.0e-2
# (GRU) at the default 512-wide shape; float16 weights 1.7e-4..3.0e-4 small, 4.7e-4 default.
# The bounds leave ~3× (qint8) and ~10× (float16) margin at the default shape.
# What qint8's 0.15 catches: structural faults — gate blocks in the wrong order, W_hh read in
# the wrong order, W_hh × 1.5 — give max|Δ| 0.15-2 (tests pin the first two). What it does
# not: faults whose effect stays under ~3× quantization's own error — one weight element
# +0.5 or +1.0 at shape=small (max|Δ| 0.06-0.08), W_hh × 1.1 (0.03-0.15), GRU without biases
# at the default shape (0.11). Verification of these models is a sanity check, not proof.
TOLERANCES = {"qint8": (0.15, 0.0), "float16": (5e-3, 0.0)}

NO_BACKWARD = "dynamic-quantized modules are inference-only (packed weights have no autograd)"


def _dynamic_modules():
    """The deprecated quantized classes and qconfigs, or a one-line UnsupportedError."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from torch.ao.nn.quantized import dynamic as nnqd
            from torch.ao.quantization import default_dynamic_qconfig, float16_dynamic_qconfig
            return ({"LSTM": nnqd.LSTM, "GRU": nnqd.GRU},
                    {"qint8": default_dynamic_qconfig, "float16": float16_dynamic_qconfig})
    except (ImportError, AttributeError) as err:
        raise UnsupportedError(
            f"dynamic-quantized RNNs are not available in PyTorch {torch.__version__} "
            f"(torch.ao.quantization: {err}) — use model=lstm or model=gru") from None


def quantize(module: nn.RNNBase, weight_dtype: str) -> nn.Module:
    classes, qconfigs = _dynamic_modules()
    module.qconfig = qconfigs[weight_dtype]
    with warnings.catch_warnings():
        # torch.ao and quantize_per_tensor warn that they are deprecated on every call.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.filterwarnings("ignore", message="torch.quantize_per_tensor")
        return classes[type(module).__name__].from_float(module)


def dynamic_quantized(spec: WorkloadSpec, kind: str = "LSTM",
                      weight_dtype: str = "qint8") -> Workload:
    if weight_dtype not in TOLERANCES:
        raise ConfigError("model.build.weight_dtype", f"'{weight_dtype}' is not supported",
                          f"use one of {', '.join(TOLERANCES)}")
    if kind not in ("LSTM", "GRU"):
        raise ConfigError("model.build.kind", f"'{kind}' is not supported", "use LSTM or GRU")
    # Built from the float module under the same seed; activations stay float32.
    float_spec = replace(spec, dtype=torch.float32, requires_grad=False)
    module = quantize(native_rnn(float_spec, kind), weight_dtype)
    work = quantized_work(spec.shape, kind, 1 if weight_dtype == "qint8" else 2)
    # Packed weights are not parameters: module_workload's params list comes out empty.
    return module_workload(
        module, module_inputs(float_spec, kind), work, no_backward_reason=NO_BACKWARD,
        reference=lambda dtype=REFERENCE_DTYPE: native(reference_spec(spec, dtype), kind),
        tolerance=TOLERANCES[weight_dtype])
