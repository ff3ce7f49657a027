"""tensorexpr's element-wise LSTM tail (`rnn_eltwise`, `dynamic_lstm`) as workloads.

The five inputs — input, hx ([b, 4h] already-multiplied gate blocks), cx ([b, h]), b_ih and
b_hh (full [b, 4h] matrices, as upstream) — are the leaves whose gradients the backward
computes. Upstream could only run forward (its backward set-up called rand_like on the
(hy, cy) tuple); here both outputs are back-propagated with seeded gradients.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, List, Tuple

import torch
from torch import Tensor, nn

from rnnexp.errors import ConfigError
from rnnexp.models.cells import lstm_tail
from rnnexp.models.inputs import REFERENCE_DTYPE, elem_bytes, reference_spec
from rnnexp.models.loops import script_if
from rnnexp.models.work import eltwise_work
from rnnexp.models.workload import Work, Workload, WorkloadSpec, seeded_grad_like

# tensorexpr's DynamicShape: dims scaled by U(1/1.2, 1) over a pool of pre-built samples.
DYNAMIC_RANGE = 1.2
POOL_SIZE = 100


class LSTMEltwise(nn.Module):
    def forward(self, input: Tensor, hx: Tensor, cx: Tensor, b_ih: Tensor, b_hh: Tensor
                ) -> Tuple[Tensor, Tensor]:
        return lstm_tail(input + hx + b_ih + b_hh, cx)


def eltwise_inputs(spec: WorkloadSpec, sample: int = 0, dynamic: bool = False
                   ) -> List[Tensor]:
    """input, hx, cx, b_ih, b_hh drawn U(0, 1) like upstream's `rand`, from the seed alone.

    Sample `sample` of a dynamic pool scales b and h by U(1/1.2, 1); every sample has its own
    seeded generator, so a reference can rebuild any sample without the pool.
    """
    rng = random.Random(f"{spec.seed}:{sample}")
    b, h = spec.shape.batch_size, spec.shape.hidden_size
    if dynamic:
        b, h = (max(1, int(n * rng.uniform(1 / DYNAMIC_RANGE, 1.0))) for n in (b, h))
    gen = torch.Generator().manual_seed(rng.getrandbits(62))
    shapes = [(b, 4 * h), (b, 4 * h), (b, h), (b, 4 * h), (b, 4 * h)]
    return [torch.rand(s, generator=gen).to(device=spec.device, dtype=spec.dtype)
            .requires_grad_(spec.requires_grad) for s in shapes]


def both_outputs_backward_setup(seed: int):
    """Seeded upstream gradients for every output (hy and cy)."""
    def setup(outputs: Any) -> tuple:
        grads = tuple(seeded_grad_like(out, seed + k) for k, out in enumerate(outputs))
        return tuple(outputs), grads
    return setup


def both_outputs_backward(outputs: tuple, grads: tuple) -> None:
    torch.autograd.backward(outputs, grads)


def reference(spec: WorkloadSpec, sample: int = 0, dynamic: bool = False,
              dtype: torch.dtype = REFERENCE_DTYPE) -> Workload:
    """The plain formula in `dtype` (float64, or the job's), on the same seeded draws as the
    model's inputs."""
    leaves = eltwise_inputs(reference_spec(spec, dtype), sample, dynamic)

    def forward(input, hx, cx, b_ih, b_hh):
        gates = input + hx + b_ih + b_hh
        i, f, g, o = gates.chunk(4, 1)
        cy = torch.sigmoid(f) * cx + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(cy), cy

    b, h = leaves[2].shape
    return Workload(inputs=tuple(leaves), params=leaves, forward=forward,
                    work=eltwise_work(b, h, elem_bytes(leaves[0].dtype)),
                    backward_setup=both_outputs_backward_setup(spec.seed),
                    backward=both_outputs_backward)


def _workload(cls, spec: WorkloadSpec, inputs: List[Tensor], work: Work, **extra) -> Workload:
    module, script_s = script_if(LSTMEltwise(), spec)
    return cls(script_s=script_s,
        inputs=tuple(inputs), params=list(inputs), forward=module, work=work,
        backward_setup=both_outputs_backward_setup(spec.seed), backward=both_outputs_backward,
        modules=(module,), reference=lambda dtype=REFERENCE_DTYPE: reference(spec, dtype=dtype),
        **extra)


def rnn_eltwise(spec: WorkloadSpec) -> Workload:
    """b = shape.batch_size, h = shape.hidden_size (upstream's default config [64, 512])."""
    b, h = spec.shape.batch_size, spec.shape.hidden_size
    return _workload(Workload, spec, eltwise_inputs(spec),
                     eltwise_work(b, h, elem_bytes(spec.dtype)))


@dataclass
class CyclingWorkload(Workload):
    """Each forward takes the next sample of a pre-built pool (tensorexpr's DynamicShape, which
    also dropped the result; here it is returned). `inputs` and `params` always name the
    sample of the latest forward, so its gradients are the ones compared and zeroed."""

    pool: List[Tuple[Tensor, ...]] = field(default_factory=list)
    position: int = 0

    def run_forward(self) -> Any:
        self.inputs = self.pool[self.position]
        self.params = list(self.inputs)
        self.position = (self.position + 1) % len(self.pool)
        return self.forward(*self.inputs)


def dynamic_eltwise(spec: WorkloadSpec, pool_size: int = POOL_SIZE,
                    dynamic_shapes: bool = True) -> Workload:
    """rnn_eltwise whose every iteration has new sizes: b and h each scaled by U(1/1.2, 1) of
    nominal, from a seeded pool of `pool_size` samples. Work is the mean over the pool.

    `dynamic_shapes` tells compilers to build for symbolic sizes; false compiles for each
    new size (tensorexpr's static compile), which lands compilations in the timed loop — the
    job then reports status `recompiled` instead of a time."""
    if pool_size < 1:
        raise ConfigError("model.build.pool_size", f"must be ≥ 1, got {pool_size}")
    pool = [tuple(eltwise_inputs(spec, i, dynamic=True)) for i in range(pool_size)]
    sizes = [(s[2].shape[0], s[2].shape[1]) for s in pool]
    mean_b = sum(b for b, _ in sizes) / pool_size
    mean_bh = sum(b * h for b, h in sizes) / pool_size
    work = eltwise_work(mean_b, mean_bh / mean_b, elem_bytes(spec.dtype))
    workload = _workload(CyclingWorkload, spec, list(pool[0]), work, pool=pool,
                         dynamic_shapes=dynamic_shapes)
    # The reference rebuilds the sample the next forward takes (verify builds it first).
    workload.reference = lambda dtype=REFERENCE_DTYPE: reference(spec, workload.position,
                                                            dynamic=True, dtype=dtype)
    return workload
