"""One stacked time-step loop shared by every cell-loop formulation (fastrnns' `py`, `jit`,
`jit_premul*`, `jit_simple`, `jit_multilayer`, `jit_layernorm*`, `jit_dropout`, `vl_*`, and
`jit_gru`).

`StackedLoop` runs any cell of `rnnexp.models.cells` over all layers and steps and returns
what nn.LSTM / nn.GRU return, so every formulation honours `num_layers` (upstream's jit
variants silently ran layer 0 only) and is checked against its reference the same way. The
state is a list ([h, c] or [h]) so LSTM and GRU cells share the loop. The same module runs
eagerly or TorchScripted (`spec.script`, decided by the backend).
"""

from __future__ import annotations

import itertools
import time
import warnings
from dataclasses import dataclass, replace
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor, nn

from rnnexp.errors import ConfigError
from rnnexp.models import references
from rnnexp.models.cells import (
    DecomposedLayerNormLSTMCell,
    GRUCell,
    LayerNormLSTMCell,
    LSTMCell,
    PremulBiasLSTMCell,
    PremulLSTMCell,
)
from rnnexp.models.inputs import (
    REFERENCE_DTYPE,
    detached_params,
    elem_bytes,
    native_rnn,
    reference_spec,
    sequence_inputs,
    varlen_inputs,
)
from rnnexp.models.native import gru as native_gru
from rnnexp.models.native import lstm as native_lstm
from rnnexp.models.native import varlen_lstm as native_varlen_lstm
from rnnexp.models.native import with_dropout_off_for_verification
from rnnexp.models.work import gru_work, layernorm_lstm_work, lstm_work
from rnnexp.models.workload import Workload, WorkloadSpec, module_workload


class StackedLoop(nn.Module):
    """Runs `cells` (one per layer) over every time step; returns (output, [h_n(, c_n)]).

    `keep_outputs=False` skips collecting the last layer's output sequence (fastrnns'
    `jit_simple` keeps only the final state); the returned output is then empty.
    """

    def __init__(self, cells: List[nn.Module], dropout: float = 0.0, keep_outputs: bool = True):
        super().__init__()
        self.cells = nn.ModuleList(cells)
        self.dropout = dropout
        self.keep_outputs = keep_outputs

    def forward(self, x: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:
        finals: List[List[Tensor]] = []
        layer_input = x
        last = len(self.cells) - 1
        for i, cell in enumerate(self.cells):
            keep = self.keep_outputs or i < last
            pre = cell.precompute(layer_input)
            s = [st[i] for st in state]
            outputs: List[Tensor] = []
            # unbind, as fastrnns does: indexing pre[t] would make each step's backward
            # write a zero tensor the size of all steps (quadratic in seq_len; at seq 100,
            # hidden 512 the backward took 4–5× as long).
            for x_t in pre.unbind(0):
                s = cell.step(x_t, s)
                if keep:
                    outputs.append(s[0])
            layer_input = torch.stack(outputs) if keep else x[:0]
            if self.dropout > 0.0 and i < last:
                layer_input = torch.dropout(layer_input, self.dropout, self.training)
            finals.append(s)
        return layer_input, [torch.stack([f[k] for f in finals]) for k in range(len(state))]


class FinalStates(nn.Module):
    """Only the final states of every layer (fastrnns `jit_simple` returns (hy, cy))."""

    def __init__(self, loop: StackedLoop):
        super().__init__()
        self.loop = loop

    def forward(self, x: Tensor, state: List[Tensor]) -> List[Tensor]:
        return self.loop(x, state)[1]


class VarlenLoop(nn.Module):
    """fastrnns' vl_py/vl_jit: each sequence on its own (batch 1), step by step, through the
    shared loop; outputs are zero-padded to [max_len, B, H] like pad_packed_sequence."""

    def __init__(self, loop: StackedLoop):
        super().__init__()
        self.loop = loop

    def forward(self, sequences: List[Tensor], state: List[Tensor]
                ) -> Tuple[Tensor, List[Tensor]]:
        outputs: List[Tensor] = []
        finals: List[List[Tensor]] = []
        for b in range(len(sequences)):
            out, final = self.loop(sequences[b].unsqueeze(1), [s[:, b:b + 1] for s in state])
            outputs.append(out.squeeze(1))
            finals.append(final)
        padded = torch.nn.utils.rnn.pad_sequence(outputs)
        return padded, [torch.cat([f[k] for f in finals], 1) for k in range(len(state))]


_scripted = itertools.count()


def script(module: nn.Module) -> nn.Module:
    """torch.jit.script of a class of the module's own, without the deprecation warning
    TorchScript now emits on every call.

    TorchScript compiles a module class once: two instances of one class share one
    profiling executor, so a second configuration at other input shapes (or grad mode) would
    run through the first one's specialised graph, fail its guards and take the fallback. A
    subclass made for this instance gets its own compiled forward and executor, and so
    configurations of one model at several shapes can share a worker process
    (rnnexp.run.blocks) and be compared within it."""
    cls = type(module)
    module.__class__ = type(f"{cls.__name__}_{next(_scripted)}", (cls,),
                            {"__module__": cls.__module__})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(module)


def script_if(module: nn.Module, spec: WorkloadSpec) -> tuple[nn.Module, Optional[float]]:
    """The module, scripted when the spec says so, and the seconds scripting took (None: not
    scripted): a compiling backend's start-up (rnnexp.models.compile_cost)."""
    if not spec.script:
        return module, None
    t0 = time.perf_counter()
    module = script(module)
    return module, time.perf_counter() - t0


@dataclass(frozen=True)
class CellKind:
    """What a cell needs around it: whose weights, how many states, work and reference."""

    cls: Callable[..., nn.Module]
    rnn: str  # "LSTM" or "GRU": the module whose seeded weights the cells take
    states: int
    work: Callable
    # Builds the reference from the reference spec; None: the native module (nn.LSTM/GRU).
    reference: Optional[Callable[[WorkloadSpec], Workload]] = None


CELLS: dict[str, CellKind] = {
    "lstm": CellKind(LSTMCell, "LSTM", 2, lstm_work),
    "premul": CellKind(PremulLSTMCell, "LSTM", 2, lstm_work),
    "premul_bias": CellKind(PremulBiasLSTMCell, "LSTM", 2, lstm_work),
    "gru": CellKind(GRUCell, "GRU", 1, gru_work),
    "layernorm": CellKind(LayerNormLSTMCell, "LSTM", 2, layernorm_lstm_work,
                          references.layernorm_lstm),
    "layernorm_decom": CellKind(DecomposedLayerNormLSTMCell, "LSTM", 2, layernorm_lstm_work,
                                references.layernorm_lstm),
}


def cells_from(params: List[Tensor], cell_cls: Callable[..., nn.Module]) -> List[nn.Module]:
    """Group nn.LSTM/nn.GRU-ordered parameters 4 per layer into cells."""
    return [cell_cls(*params[i:i + 4]) for i in range(0, len(params), 4)]


def stacked_loop(spec: WorkloadSpec, kind: CellKind, dropout: float = 0.0,
                 keep_outputs: bool = True) -> StackedLoop:
    weights = detached_params(native_rnn(spec, kind.rnn), spec)
    loop = StackedLoop(cells_from(weights, kind.cls), dropout=dropout,
                       keep_outputs=keep_outputs)
    # nn.Parameter makes every tensor require grad; forward-only runs must not record graphs.
    return loop.requires_grad_(spec.requires_grad)


def cell_kind(cell: str) -> CellKind:
    if cell not in CELLS:
        raise ConfigError("model.build.cell", f"'{cell}' is not a known cell",
                          f"use one of {', '.join(CELLS)}")
    return CELLS[cell]


def cell_loop(spec: WorkloadSpec, cell: str = "lstm", dropout: float = 0.0,
              final_state_only: bool = False) -> Workload:
    """A stacked cell loop holding the weights of nn.LSTM / nn.GRU under the same seed.

    `dropout` acts between layers (p=0.4 for fastrnns' jit_dropout): verification runs with
    it off, timing with it on. `final_state_only` returns only [h_n, c_n] (jit_simple).
    """
    kind = cell_kind(cell)
    loop = stacked_loop(spec, kind, dropout, keep_outputs=not final_state_only)
    module, script_s = script_if(FinalStates(loop) if final_state_only else loop, spec)
    x, *state = sequence_inputs(spec, states=kind.states)
    reference = _reference(spec, kind, final_state_only)
    workload = module_workload(module, (x, list(state)),
                               kind.work(spec.shape, elem_bytes(spec.dtype)),
                               backward_seed=spec.seed, reference=reference, script_s=script_s)
    if dropout > 0.0:
        with_dropout_off_for_verification(workload, module, dropout)
    return workload


def _reference(spec: WorkloadSpec, kind: CellKind, final_state_only: bool
               ) -> Callable[..., Workload]:
    if kind.reference is not None:
        build = kind.reference
    else:
        build = native_lstm if kind.rnn == "LSTM" else native_gru
    if final_state_only:
        return lambda dtype=REFERENCE_DTYPE: only_final_states(build(reference_spec(spec, dtype)))
    return lambda dtype=REFERENCE_DTYPE: build(reference_spec(spec, dtype))


def only_final_states(workload: Workload) -> Workload:
    """The reference of `jit_simple`: nn.LSTM's (h_n, c_n) without the output sequence."""
    forward = workload.forward
    return replace(workload, forward=lambda x, state: forward(x, state)[1])


def varlen_loop(spec: WorkloadSpec, cell: str = "lstm") -> Workload:
    """fastrnns' vl_py / vl_jit: per-sequence, per-step loop over seeded variable lengths."""
    kind = cell_kind(cell)
    if kind.rnn != "LSTM" or kind.reference is not None:
        raise ConfigError("model.build.cell", f"'{cell}' has no variable-length reference",
                          "the reference is packed nn.LSTM: use an LSTM cell without LayerNorm")
    module, script_s = script_if(VarlenLoop(stacked_loop(spec, kind)), spec)
    sequences, lengths, state = varlen_inputs(spec, states=kind.states)
    return module_workload(
        module, (sequences, list(state)),
        kind.work(spec.shape, elem_bytes(spec.dtype), tokens=int(lengths.sum())),
        backward_seed=spec.seed, script_s=script_s,
        reference=lambda dtype=REFERENCE_DTYPE: native_varlen_lstm(reference_spec(spec, dtype)))
