"""Verification before timing: forward outputs and parameter gradients against a reference.

The reference is the plain PyTorch module (nn.LSTM / nn.GRU / a formula) holding identical
weights, run in float64 on the CPU, so it checks the backend's kernels as well as the
formulation. Tolerances follow the dtype under test.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterator, Optional

import torch

from rnnexp.workload import Workload

# (atol, rtol) per dtype under test, elementwise as in torch.testing.assert_close.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-3),
    torch.float16: (1e-2, 1e-2),
    # bfloat16 keeps 8 bits of mantissa: weight gradients summed over seq × batch steps
    # reach |Δ| ≈ 8e-2 on small elements (jit_gru at shape=small), hence atol 0.1.
    torch.bfloat16: (1e-1, 5e-2),
}


@dataclass
class Verification:
    status: str  # passed | failed | skipped | unavailable
    max_abs_error: Optional[float] = None
    atol: Optional[float] = None
    rtol: Optional[float] = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def as_dict(self) -> dict:
        return asdict(self)


def tensors(tree: Any) -> Iterator[torch.Tensor]:
    """The tensors of nested tuples/lists in order."""
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, (tuple, list)):
        for item in tree:
            yield from tensors(item)


def _compare(pairs: list[tuple[str, torch.Tensor, torch.Tensor]], atol: float, rtol: float
             ) -> tuple[float, str]:
    worst, failure = 0.0, ""
    for name, actual, expected in pairs:
        if actual.shape != expected.shape:
            return float("inf"), f"{name}: shape {tuple(actual.shape)} ≠ {tuple(expected.shape)}"
        a = actual.detach().to("cpu", torch.float64)
        e = expected.detach().to("cpu", torch.float64)
        err = (a - e).abs().max().item() if a.numel() else 0.0
        worst = max(worst, err)
        if not failure:
            try:
                torch.testing.assert_close(a, e, atol=atol, rtol=rtol)
            except AssertionError as exc:
                failure = f"{name}: " + str(exc).strip().splitlines()[0]
    return worst, failure


def verify(workload: Workload, dtype: torch.dtype, *, backward: bool,
           tolerance: Optional[tuple[float, float]] = None) -> Verification:
    if workload.reference is None:
        return Verification("unavailable", detail="this model has no reference")
    atol, rtol = tolerance or workload.tolerance or TOLERANCES[dtype]
    with workload.verify_context():
        result = _verify(workload, atol, rtol, backward=backward)
    if workload.verify_note:
        result.detail = "; ".join(filter(None, [result.detail, workload.verify_note]))
    return result


def _verify(workload: Workload, atol: float, rtol: float, *, backward: bool) -> Verification:
    reference = workload.reference()  # type: ignore[misc]
    out, ref_out = workload.run_forward(), reference.run_forward()
    got, want = list(tensors(out)), list(tensors(ref_out))
    if len(got) != len(want):
        return Verification("failed", float("inf"), atol, rtol,
                            f"{len(got)} outputs, reference has {len(want)}")
    pairs = [(f"output[{i}]", g, w) for i, (g, w) in enumerate(zip(got, want, strict=True))]
    if backward and workload.has_backward and reference.has_backward:
        workload.zero_grad()
        reference.zero_grad()
        workload.backward(*workload.backward_setup(out))  # type: ignore[misc]
        reference.backward(*reference.backward_setup(ref_out))  # type: ignore[misc]
        if len(workload.params) != len(reference.params):
            return Verification("failed", float("inf"), atol, rtol,
                                f"{len(workload.params)} parameters, reference has "
                                f"{len(reference.params)}")
        for i, (p, r) in enumerate(zip(workload.params, reference.params, strict=True)):
            if p.grad is None or r.grad is None:
                return Verification("failed", float("inf"), atol, rtol, f"param[{i}] has no grad")
            pairs.append((f"grad(param[{i}])", p.grad, r.grad))
        workload.zero_grad()
    worst, failure = _compare(pairs, atol, rtol)
    return Verification("failed" if failure else "passed", worst, atol, rtol, failure)
