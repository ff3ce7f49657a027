"""The Workload protocol: everything needed to run one forward and one backward, and how
much work that is (the successor of fastrnns' ModelDef)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Optional, Sequence

import torch

from rnnexp.config.schema import ShapeConfig
from rnnexp.models.work import Work  # defined there: results read it without torch


@dataclass(frozen=True)
class WorkloadSpec:
    """What a model factory is given: sizes, placement and how to build."""

    shape: ShapeConfig
    device: torch.device
    dtype: torch.dtype
    seed: int
    # TorchScript the loop models (decided by the backend, not the model).
    script: bool = False
    # Build tensors that need gradients (false for forward-only runs).
    requires_grad: bool = True
    # The low-precision reference's arithmetic, decided at plan time (Workload.reference_math),
    # and why, for the verification record.
    reference_math: str = ""
    reference_note: str = ""


@dataclass
class Workload:
    inputs: tuple
    params: list[torch.Tensor]
    forward: Callable[..., Any]
    work: Work
    # Returns the arguments of `backward` from the forward outputs (untimed);
    # None marks a forward-only workload.
    backward_setup: Optional[Callable[[Any], tuple]] = None
    backward: Optional[Callable[..., None]] = None
    # Why backward is not applicable, shown instead of a number.
    no_backward_reason: str = ""
    # The module(s) behind `forward`, for backends that compile or inspect them.
    modules: Sequence[torch.nn.Module] = field(default_factory=tuple)
    # Builds the reference this workload is verified against, in the dtype it is given
    # (float64 by default; verify also builds one in the job's dtype). None: not verifiable.
    reference: Optional[Callable[..., Workload]] = None
    # (atol, rtol) replacing the measured tolerance, for models that approximate their
    # reference by design (dynamic quantization).
    tolerance: Optional[tuple[float, float]] = None
    # Entered around verification only, e.g. to switch dropout off so the comparison is
    # deterministic; `verify_note` says so in the verification record.
    verify_context: Callable[[], ContextManager] = contextlib.nullcontext
    verify_note: str = ""
    # Input sizes change from call to call: compilers must build for symbolic sizes.
    dynamic_shapes: bool = False
    # How the low-precision reference computes (rnnexp.machine.emulation): "" in the job's dtype;
    # "tf32" float32 with TF32 matmuls (set by cudnn with allow_tf32); "emulated" the job's
    # half dtype emulated in float32 (chosen at plan time when the CPU is too slow for it).
    reference_math: str = ""
    # Seconds torch.jit.script took while the factory built it (None: not scripted).
    script_s: Optional[float] = None
    # Called before every forward that starts an iteration, where the backend replays CUDA
    # graphs (torch.compiler.cudagraph_mark_step_begin): the previous iteration's outputs
    # may then be overwritten, so nothing may read them afterwards.
    step_begin: Optional[Callable[[], None]] = None

    @property
    def has_backward(self) -> bool:
        return self.backward is not None

    def run_forward(self) -> Any:
        return self.forward(*self.inputs)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None
        for x in self.inputs:
            if isinstance(x, torch.Tensor):
                x.grad = None


def seeded_grad_like(outputs: Any, seed: int) -> torch.Tensor:
    """A reproducible upstream gradient for the first output (fastrnns' backward set-up,
    but seeded with a private generator so seed 0 is honoured and global RNG untouched)."""
    out = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    grad = torch.randn(out.shape, generator=gen, dtype=torch.float32)
    return grad.to(device=out.device, dtype=out.dtype)


def first_output_backward_setup(seed: int) -> Callable[[Any], tuple]:
    def setup(outputs: Any) -> tuple:
        out = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
        return out, seeded_grad_like(out, seed)

    return setup


def tensor_backward(out: torch.Tensor, grad: torch.Tensor) -> None:
    out.backward(grad)


def first_output_backward(seed: int) -> dict[str, Callable]:
    """The Workload fields of a backward through the first output with a seeded gradient."""
    return {"backward_setup": first_output_backward_setup(seed), "backward": tensor_backward}


def module_workload(module: torch.nn.Module, inputs: tuple, work: Work, *,
                    backward_seed: Optional[int] = None, **fields: Any) -> Workload:
    """A workload that runs `module` as is, over its own parameters; with `backward_seed`,
    the backward goes through its first output (else it is forward-only)."""
    backward = first_output_backward(backward_seed) if backward_seed is not None else {}
    return Workload(inputs=tuple(inputs), params=list(module.parameters()), forward=module,
                    work=work, modules=(module,), **backward, **fields)
