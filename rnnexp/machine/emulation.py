"""Low-precision arithmetic emulated in float32 on the CPU, for the reference whose own error
sets verification's tolerance (rnnexp.measure.verify):

- `tf32`: float32 with TF32 matmuls, as cuDNN computes with `allow_tf32` on SM >= 8.0 (its
  CUDNN_DEFAULT_MATH): every matmul's float32 operands rounded to TF32's 10-bit mantissa.
  A CPU float32 reference gets ~2¹³× closer to the truth than that, so it cannot say what
  TF32 achieves.
- `cudnn_persist_small_h`: float32 with every matmul's operands rounded to 16 mantissa bits,
  as cuDNN's persistent small-hidden kernels (CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H, which
  PyTorch picks for LSTM/GRU at hidden ≤ 192 forward / ≤ 128 backward) compute in float32.
  Measured on an H200 (cuDNN 9.19): their float32 error from float64 was 11.8–15.7× the
  randomly rounded float32 reference's at shape=small (lstm, gru, layer-norm and dropout
  LSTMs), where this model gives 12.6–17.1× and 14 or 18 bits give 45× or 3× — what it
  is inside the kernel (a split of float32 into two 8-bit halves would match) is not
  documented; the error is.
- `emulated`: the job's half-precision dtype, every op's result rounded to it, computed in
  float32 — for CPUs whose native float16 kernels are too slow (an AMD EPYC without
  AVX512-FP16 ran float16 `mm` ~40× slower than float32).

Both are dispatch modes below autograd, so the backward's ops are emulated too; oneDNN's
fused RNN kernel is switched off under them, so nn.LSTM's matmuls are visible ops.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

TF32 = "tf32"
PERSIST_SMALL_H = "cudnn_persist_small_h"
EMULATED = "emulated"
# The mantissa bits a matmul's float32 operands keep, per arithmetic that rounds them.
OPERAND_BITS = {TF32: 10, PERSIST_SMALL_H: 16}
TF32_EPS = 2.0 ** -OPERAND_BITS[TF32]  # TF32 keeps 10 of float32's 23 mantissa bits

_aten = torch.ops.aten
MATMULS = {_aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten.baddbmm.default,
           _aten.mv.default, _aten.addmv.default, _aten.dot.default}


def round_mantissa(t: torch.Tensor, keep: int) -> torch.Tensor:
    """float32 values rounded to `keep` of their 23 mantissa bits (to nearest, ties to even),
    still float32."""
    drop = 23 - keep
    bits = t.contiguous().view(torch.int32)
    rounded = (bits + ((1 << (drop - 1)) - 1) + ((bits >> drop) & 1)) & -(1 << drop)
    return rounded.view(torch.float32).view(t.shape)


class _Mode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # never under torch.compile; saves dynamo's import (~1 s)


class RoundedOperands(_Mode):
    """Every float32 matmul's operands rounded to `keep` mantissa bits (accumulation stays
    float32)."""

    def __init__(self, keep: int):
        super().__init__()
        self.keep = keep

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in MATMULS:
            args = tree_map(lambda a: round_mantissa(a, self.keep) if _is_f32(a) else a, args)
        return func(*args, **(kwargs or {}))


class RoundedTo(_Mode):
    """Every new float32 result rounded to `dtype`: `dtype`'s storage, float32's arithmetic
    (what GPU half-precision kernels do, accumulating in float32). Views and in-place ops
    return their input's storage, already rounded, and are left alone: a copy would break
    the aliasing autograd relies on."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        schema = func._schema
        if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
            return out
        return tree_map(self._round, out)

    def _round(self, t: Any) -> Any:
        return t.to(self.dtype).to(torch.float32) if _is_f32(t) else t


def _is_f32(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and a.dtype == torch.float32


def eps(math: str, dtype: torch.dtype) -> float:
    """The unit of the precision a reference computes in."""
    return TF32_EPS if math == TF32 else torch.finfo(dtype).eps


def reference_dtype(math: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype the low-precision reference is built in."""
    return torch.float32 if math in (*OPERAND_BITS, EMULATED) else dtype


def round_tensors(tensors: Any, dtype: torch.dtype) -> None:
    """A float32 reference's weights and inputs, rounded in place to the values the model
    holds in `dtype`."""
    with torch.no_grad():
        for t in tensors:
            if _is_f32(t):
                t.copy_(t.to(dtype))


@contextlib.contextmanager
def matmuls_visible() -> Iterator[None]:
    """oneDNN's fused RNN kernel off, so nn.LSTM's matmuls and cell ops reach a dispatch
    mode as ops of their own; restored afterwards. (torch.backends.mkldnn.flags would also
    reset oneDNN's determinism and precision settings.)"""
    onednn = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = onednn


@contextlib.contextmanager
def arithmetic(math: str, dtype: torch.dtype) -> Iterator[None]:
    """Entered around the low-precision reference's runs; nothing for native arithmetic."""
    if math not in (*OPERAND_BITS, EMULATED):
        yield
        return
    mode = RoundedOperands(OPERAND_BITS[math]) if math in OPERAND_BITS else RoundedTo(dtype)
    with matmuls_visible(), mode:
        yield


def describe(math: str, dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if math == TF32:
        return "float32 with TF32 matmuls, emulated"
    if math == PERSIST_SMALL_H:
        return (f"float32 with matmul operands at {OPERAND_BITS[math]} bits, as cuDNN's "
                "persistent small-hidden kernels, emulated")
    if math == EMULATED:
        return f"{name} emulated in float32"
    return name
