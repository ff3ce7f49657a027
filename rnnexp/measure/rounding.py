"""A float32 computation rounded as coarsely as float32 allows: verification's second
low-precision reference (rnnexp.measure.verify).

The CPU's float32 reference is one correct float32 computation, and an unusually exact one:
its BLAS sums a reduction in blocks (error growing like √log n), its math library rounds
sigmoid and tanh to within an ulp, oneDNN fuses the cell. A GPU library is just as correct
when it sums a reduction recursively (error growing like √n), forms the gates in another
order, or calls math functions documented to 2 ulp (CUDA's `expf`, `tanhf`). At the
fastrnns shape the long reductions dominate both errors and they agree; at `shape=small`
(reductions of 64, 8 steps) the CPU is ~1 ulp of each tensor's RMS from float64, and a
bound of a few times that fails kernels that round differently but correctly. PyTorch
picks cuDNN's persistent small-hidden algorithm (CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H,
forward hidden ≤ 192, backward ≤ 128, unpacked input) exactly there.

`RandomRounding` reruns the reference with the results of the operations implementations
are free to compute differently moved by a random error of the size float32's guarantees
allow — Monte Carlo arithmetic (Parker, 1997), with the √n model of a recursive sum's error
(Higham & Mary, "A new approach to probabilistic rounding error analysis", 2019):

- a math function (exp, tanh, sigmoid, their derivatives, ...): uniform within ±2 ulp of
  its result, the bound CUDA documents for its single-precision functions;
- a sum of n terms (matmul, sum, mean): standard deviation u·√(n/2)·‖terms‖₂, the error of
  summing them one by one in float32.

IEEE arithmetic (add, mul, div) rounds to nearest on every machine and is left as computed,
as are exact operations (copies, views, negation, max) and what it does not model. Its error
from float64 propagates through the recurrence and the backward like any rounding error
does, so it scales with the sequence length and the conditioning of the model as the CPU
reference's does.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rnnexp.machine import emulation

UNIT = 2.0 ** -24  # float32's unit roundoff u: half an ulp of 1
FUNCTION_ULPS = 2.0  # CUDA C++ Programming Guide, single-precision math functions
SEED = 0
POOL = 1 << 21  # random draws kept (8 MiB), reused at random offsets

_aten = torch.ops.aten
# aten op → (argument index of the left factor, of the right factor, of an added term).
SUMS_OF_PRODUCTS = {_aten.mm.default: (0, 1, None), _aten.bmm.default: (0, 1, None),
                    _aten.addmm.default: (1, 2, 0), _aten.baddbmm.default: (1, 2, 0)}
SUMS = {_aten.sum.default, _aten.sum.dim_IntList, _aten.mean.default, _aten.mean.dim}
FUNCTIONS = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sigmoid", "tanh",
             "pow", "sqrt", "rsqrt", "reciprocal", "erf", "erfc", "sin", "cos",
             "sigmoid_backward", "tanh_backward", "_softmax", "_log_softmax", "logit",
             "softplus", "silu", "gelu", "elu"}


def _f32(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype == torch.float32


class RandomRounding(TorchDispatchMode):
    """Every new float32 result moved by a random error within float32's guarantees
    (module docstring); seeded, so a verification is reproducible."""

    def __init__(self, seed: int = SEED):
        super().__init__()
        self.gen = torch.Generator().manual_seed(seed)
        self.perturbed: dict[str, int] = {}  # op name → results perturbed (for tests)
        # Draws for every result are slices of one pool at random offsets: drawing each
        # afresh cost as much as the reference's own arithmetic.
        pool = torch.empty(POOL).uniform_(-1.0, 1.0, generator=self.gen)
        self._pool = torch.cat([pool, pool])

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # never under torch.compile; saves dynamo's import

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not _f32(out) or not out.numel():
            return out
        if any(r.alias_info is not None and not r.alias_info.is_write
               for r in func._schema.returns):
            return out  # a view: nothing computed
        error = self._error(func, args, kwargs, out)
        if error is None:
            return out
        name = func.overloadpacket.__name__
        self.perturbed[name] = self.perturbed.get(name, 0) + 1
        # A fresh result (or an in-place op's own argument): nothing else holds it yet.
        return out.add_(error)

    def _error(self, func, args, kwargs, out: torch.Tensor) -> Optional[torch.Tensor]:
        """The random error to add to `out`; None where the op is exact or unmodelled."""
        if func in SUMS_OF_PRODUCTS or func in SUMS:
            # Uniform with the model's standard deviation (√3 σ bound): a third of the cost
            # of normal draws, and a sum of many such errors is normal anyway.
            return self._uniform(out, math.sqrt(3)).mul_(
                self._sum_error_std(func, args, kwargs, out))
        name = func.overloadpacket.__name__.rstrip("_")
        if name not in FUNCTIONS:
            return None  # IEEE arithmetic, copies and views: computed alike everywhere
        bound = 2 * UNIT * FUNCTION_ULPS
        # Uniform within ±bound of |out|; the sign of out does not matter to a symmetric draw.
        return self._uniform(out, bound).mul_(out)

    def _uniform(self, like: torch.Tensor, bound: float) -> torch.Tensor:
        """Uniform draws within ±bound shaped like `like` (a new tensor)."""
        n = like.numel()
        if n > POOL:
            return torch.empty_like(like).uniform_(-bound, bound, generator=self.gen)
        start = int(torch.randint(POOL, (), generator=self.gen))
        return self._pool[start:start + n].view(like.shape) * bound

    @staticmethod
    def _sum_error_std(func, args, kwargs, out: torch.Tensor) -> torch.Tensor:
        """u·√(n/2)·‖terms‖₂ for each result of a sum of n terms. For a matmul, ‖terms‖₂ of
        result (i, j) is taken as ‖row i‖·‖column j‖/√n, exact when either factor's entries
        are of one size (and two reductions instead of a second matmul)."""
        if func in SUMS_OF_PRODUCTS:
            left, right, added = SUMS_OF_PRODUCTS[func]
            a, b = args[left], args[right]
            n = a.shape[-1]
            squares = a.square().sum(-1, keepdim=True) * b.square().sum(-2, keepdim=True) / n
            if added is not None:  # the added term is one more (n + 1 terms)
                squares = squares + args[added].square()
                n += 1
            return squares.sqrt_().mul_(UNIT * math.sqrt(n / 2))
        x = args[0]
        n = max(1, x.numel() // out.numel())
        dims = args[1] if len(args) > 1 else None
        keepdim = bool(args[2]) if len(args) > 2 else bool(kwargs.get("keepdim", False))
        squares = x.square().sum(dims, keepdim=keepdim) if dims else x.square().sum()
        scale = UNIT * math.sqrt(n / 2) / (n if func in (_aten.mean.default, _aten.mean.dim)
                                           else 1)
        return squares.sqrt_().mul_(scale)


@contextlib.contextmanager
def randomly_rounded(seed: int = SEED) -> Iterator[RandomRounding]:
    """Around a float32 reference's runs: oneDNN's fused RNN kernel off (nn.LSTM's matmuls
    and cell ops become visible ops), every result randomly rounded."""
    with emulation.matmuls_visible(), RandomRounding(seed) as mode:
        yield mode


def applies(math_: str, dtype: torch.dtype) -> bool:
    """Only float32 arithmetic needs it: a half dtype's rounding of every stored result,
    and TF32's of every matmul operand, are coarser than any float32 order of summation."""
    return dtype == torch.float32 and not math_
