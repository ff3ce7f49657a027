"""One stacked time-step loop shared by every cell-loop formulation (fastrnns' `py`, `jit`, ...).

A cell is a module with `precompute(x_all)` (work hoisted out of the time loop, e.g. the input
GEMM of the premul variants) and `step(x_t, h, c)`. `StackedLoop` runs any cell over all layers
and steps and returns what nn.LSTM returns, so every formulation honours `num_layers` and is
checked against nn.LSTM the same way. The same module runs eagerly (`py`) or scripted (`jit`).
"""

from __future__ import annotations

import warnings
from typing import Callable, List, Tuple

import torch
from torch import Tensor, nn

from rnnexp.models.inputs import (
    detached_params,
    elem_bytes,
    native_rnn,
    reference_spec,
    sequence_inputs,
)
from rnnexp.models.native import lstm as native_lstm
from rnnexp.models.work import lstm_work
from rnnexp.workload import (
    Workload,
    WorkloadSpec,
    first_output_backward_setup,
    tensor_backward,
)


class LSTMCell(nn.Module):
    """fastrnns `lstm_cell`: both gate GEMMs inside the step; gate order i, f, g, o."""

    def __init__(self, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor, b_hh: Tensor):
        super().__init__()
        self.w_ih = nn.Parameter(w_ih)
        self.w_hh = nn.Parameter(w_hh)
        self.b_ih = nn.Parameter(b_ih)
        self.b_hh = nn.Parameter(b_hh)

    def precompute(self, x: Tensor) -> Tensor:
        return x

    def gates(self, x_t: Tensor, h: Tensor) -> Tensor:
        return torch.mm(x_t, self.w_ih.t()) + torch.mm(h, self.w_hh.t()) + self.b_ih + self.b_hh

    def step(self, x_t: Tensor, h: Tensor, c: Tensor) -> Tuple[Tensor, Tensor]:
        return lstm_tail(self.gates(x_t, h), c)


def lstm_tail(gates: Tensor, c: Tensor) -> Tuple[Tensor, Tensor]:
    """The LSTM pointwise tail: c' = σ(f)c + σ(i)tanh(g); h' = σ(o)tanh(c')."""
    i, f, g, o = gates.chunk(4, 1)
    i = torch.sigmoid(i)
    f = torch.sigmoid(f)
    g = torch.tanh(g)
    o = torch.sigmoid(o)
    cy = f * c + i * g
    hy = o * torch.tanh(cy)
    return hy, cy


class StackedLoop(nn.Module):
    """Runs `cells` (one per layer) over every time step; returns (output, (h_n, c_n))."""

    def __init__(self, cells: List[nn.Module], dropout: float = 0.0):
        super().__init__()
        self.cells = nn.ModuleList(cells)
        self.dropout = dropout

    def forward(self, x: Tensor, state: Tuple[Tensor, Tensor]) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        h0, c0 = state
        hs: List[Tensor] = []
        cs: List[Tensor] = []
        layer_input = x
        last = len(self.cells) - 1
        for i, cell in enumerate(self.cells):
            pre = cell.precompute(layer_input)
            h = h0[i]
            c = c0[i]
            outputs: List[Tensor] = []
            for t in range(pre.size(0)):
                h, c = cell.step(pre[t], h, c)
                outputs.append(h)
            layer_input = torch.stack(outputs)
            if self.dropout > 0.0 and i < last:
                layer_input = torch.dropout(layer_input, self.dropout, self.training)
            hs.append(h)
            cs.append(c)
        return layer_input, (torch.stack(hs), torch.stack(cs))


def script(module: nn.Module) -> nn.Module:
    """torch.jit.script, without the deprecation warning TorchScript now emits on every call."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(module)


def cells_from(params: List[Tensor], cell_cls: Callable[..., nn.Module]) -> List[nn.Module]:
    """Group nn.LSTM-ordered parameters 4 per layer into cells."""
    return [cell_cls(*params[i:i + 4]) for i in range(0, len(params), 4)]


def loop_lstm(spec: WorkloadSpec, cell: str = "lstm", dropout: float = 0.0) -> Workload:
    """A stacked cell loop holding the weights of nn.LSTM under the same seed."""
    cell_cls = CELLS[cell]
    weights = detached_params(native_rnn(spec, "LSTM"), spec)
    module: nn.Module = StackedLoop(cells_from(weights, cell_cls), dropout=dropout)
    if spec.script:
        module = script(module)
    x, h0, c0 = sequence_inputs(spec)
    return Workload(
        inputs=(x, (h0, c0)),
        params=list(module.parameters()),
        forward=module,
        work=lstm_work(spec.shape, elem_bytes(spec.dtype)),
        backward_setup=first_output_backward_setup(spec.seed),
        backward=tensor_backward,
        modules=(module,),
        reference=lambda: native_lstm(reference_spec(spec)),
    )


CELLS: dict[str, Callable[..., nn.Module]] = {
    "lstm": LSTMCell,
}
