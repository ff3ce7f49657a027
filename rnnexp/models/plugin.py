"""The workload of a plugin kernel (rnnexp.config.kernel_plugins), built as the built-ins are.

A kernel with rnnexp's reference gets nn.LSTM's / nn.GRU's seeded weights (the same values
the built-in models and the float64 reference hold), the same seeded inputs and backward
gradient, the same work counts, and the native module as its reference. A kernel that keeps
its weights in another layout holds `layout(weights)`; the workload's parameters stay
nn.LSTM's, and during verification their gradients are the kernel's mapped back through
the layout (the vector-Jacobian product), so they compare with the reference's one to one.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch import nn

from rnnexp.config.kernel_plugins import COMPUTES, Kernel
from rnnexp.models.inputs import (
    REFERENCE_DTYPE,
    elem_bytes,
    module_inputs,
    native_rnn,
    reference_spec,
)
from rnnexp.models.native import native
from rnnexp.models.work import gru_work, lstm_work
from rnnexp.models.workload import Workload, WorkloadSpec, first_output_backward, tensor_backward

WORK = {"lstm": lstm_work, "gru": gru_work}


def build(kernel: Kernel, spec: WorkloadSpec, options: dict[str, Any]) -> Workload:
    if kernel.reference == "own":
        workload = kernel.factory(spec, **options)
        if not isinstance(workload, Workload):
            raise TypeError(f"kernel {kernel.name}: its factory returned a "
                            f"{type(workload).__name__}, not an rnnexp Workload")
        return workload
    rnn = COMPUTES[kernel.computes]
    weights = [nn.Parameter(p.detach().clone(), requires_grad=spec.requires_grad)
               for p in native_rnn(spec, rnn).parameters()]
    held = weights if kernel.layout is None else relaid(kernel.layout(weights), spec)
    forward = kernel.factory(spec, held, **options)
    workload = Workload(
        inputs=module_inputs(spec, rnn), params=weights, forward=forward,
        work=WORK[kernel.computes](spec.shape, elem_bytes(spec.dtype)),
        modules=(forward,) if isinstance(forward, nn.Module) else (),
        reference=lambda dtype=REFERENCE_DTYPE: native(reference_spec(spec, dtype), rnn),
        **first_output_backward(spec.seed))
    if kernel.layout is not None:
        pullback = Pullback(kernel.layout, weights, held)
        workload.backward = pullback.backward
        workload.verify_context = pullback.verifying
        workload.verify_note = f"gradients of {kernel.name}'s weight layout mapped back to " \
                               f"nn.{rnn}'s for verification"
    return workload


def relaid(tensors: list[torch.Tensor], spec: WorkloadSpec) -> list[nn.Parameter]:
    """The kernel's own weights: leaves, computed once from nn.LSTM's (never timed)."""
    return [nn.Parameter(t.detach().contiguous(), requires_grad=spec.requires_grad)
            for t in tensors]


class Pullback:
    """While verifying, the backward also maps the gradients of the kernel's weights back
    to nn.LSTM's parameters; timed backwards only run the kernel's."""

    def __init__(self, layout, weights: list[nn.Parameter], held: list[nn.Parameter]):
        self.layout, self.weights, self.held = layout, weights, held
        self.active = False

    @contextlib.contextmanager
    def verifying(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False

    def backward(self, out: torch.Tensor, grad: torch.Tensor) -> None:
        if not self.active:
            tensor_backward(out, grad)
            return
        for p in self.held:
            p.grad = None
        tensor_backward(out, grad)
        with torch.enable_grad():
            mapped = self.layout(self.weights)
        pairs = [(m, p.grad) for m, p in zip(mapped, self.held, strict=True)
                 if p.grad is not None]
        grads = torch.autograd.grad([m for m, _ in pairs], self.weights,
                                    grad_outputs=[g for _, g in pairs], allow_unused=True)
        for w, g in zip(self.weights, grads, strict=True):
            w.grad = g
