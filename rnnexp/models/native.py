"""PyTorch's own recurrent modules (nn.LSTM, nn.GRU); the backend decides which kernels run
them. Also fastrnns' cudnn_dropout, cudnn_layernorm and vl_cudnn around nn.LSTM."""

from __future__ import annotations

import contextlib
from typing import Iterator, List, Tuple

import torch
from torch import Tensor, nn
from torch.nn.utils import rnn as rnn_utils

from rnnexp.models import references
from rnnexp.models.inputs import (
    REFERENCE_DTYPE,
    elem_bytes,
    module_inputs,
    native_rnn,
    reference_spec,
    sequence_inputs,
    varlen_inputs,
)
from rnnexp.models.work import gru_work, layernorm_tail_work, lstm_work
from rnnexp.models.workload import Workload, WorkloadSpec, module_workload


@contextlib.contextmanager
def dropout_off(module: nn.RNNBase) -> Iterator[None]:
    """Dropout p=0 for the duration (verification), still in training mode; p restored after.

    Not eval mode: verification runs a backward, and cuDNN's and MIOpen's RNN backward refuse
    a forward made in eval mode ("cudnn RNN backward can only be called in training mode",
    aten/src/ATen/native/cudnn/RNN.cpp; likewise miopen/RNN_miopen.cpp). nn.RNNBase reads
    `self.dropout` at every forward, so p=0 in training mode is a deterministic forward."""
    p = module.dropout
    module.dropout = 0.0
    try:
        yield
    finally:
        module.dropout = p


def with_dropout_off_for_verification(workload: Workload, module: nn.RNNBase,
                                      dropout: float) -> Workload:
    workload.verify_context = lambda: dropout_off(module)
    workload.verify_note = (f"verified with dropout off (p=0, training mode); timed with dropout "
                            f"p={dropout} between layers")
    return workload


def native(spec: WorkloadSpec, kind: str, dropout: float = 0.0) -> Workload:
    """nn.LSTM or nn.GRU (`kind`), run as is."""
    module = native_rnn(spec, kind, dropout=dropout)
    work = (lstm_work if kind == "LSTM" else gru_work)(spec.shape, elem_bytes(spec.dtype))
    workload = module_workload(
        module, module_inputs(spec, kind), work, backward_seed=spec.seed,
        reference=lambda dtype=REFERENCE_DTYPE: native(reference_spec(spec, dtype), kind))
    if dropout > 0.0:
        with_dropout_off_for_verification(workload, module, dropout)
    return workload


def lstm(spec: WorkloadSpec, dropout: float = 0.0) -> Workload:
    """nn.LSTM; `dropout` (fastrnns cudnn_dropout: 0.4) acts between layers only."""
    return native(spec, "LSTM", dropout)


def gru(spec: WorkloadSpec) -> Workload:
    return native(spec, "GRU")


class LSTMWithLayerNormCalls(nn.Module):
    """fastrnns' cudnn_layernorm: nn.LSTM, then seq_len × (two LayerNorms over [B, 4H] on a
    fixed input, results unused, and one over c_n). A forward-only lower bound on the cost of
    a layer-norm LSTM built from the vendor LSTM, not a layer-norm LSTM."""

    def __init__(self, lstm: nn.LSTM, batch: int, gen: torch.Generator):
        super().__init__()
        hidden = lstm.hidden_size
        opts = {"device": lstm.weight_hh_l0.device, "dtype": lstm.weight_hh_l0.dtype}
        self.lstm = lstm
        self.ln_i = nn.LayerNorm(4 * hidden, **opts)
        self.ln_h = nn.LayerNorm(4 * hidden, **opts)
        self.ln_c = nn.LayerNorm(hidden, **opts)
        self.register_buffer("ln_input", torch.randn(batch, 4 * hidden, generator=gen)
                             .to(**opts))

    def forward(self, x: Tensor, state: Tuple[Tensor, Tensor]
                ) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        out, (h, c) = self.lstm(x, state)
        for _ in range(x.size(0)):
            self.ln_i(self.ln_input)
            self.ln_h(self.ln_input)
            c = self.ln_c(c)
        return out, (h, c)


NO_BACKWARD_LAYERNORM = ("forward-only lower bound (fastrnns cudnn_layernorm): its LayerNorms "
                         "are not part of the recurrence, so a backward would time nothing real")


def lstm_layernorm(spec: WorkloadSpec) -> Workload:
    gen = torch.Generator().manual_seed(spec.seed + 29)
    module = LSTMWithLayerNormCalls(native_rnn(spec, "LSTM"), spec.shape.batch_size, gen)
    module.requires_grad_(spec.requires_grad)
    x, h0, c0 = sequence_inputs(spec)
    return module_workload(
        module, (x, (h0, c0)), layernorm_tail_work(spec.shape, elem_bytes(spec.dtype)),
        no_backward_reason=NO_BACKWARD_LAYERNORM,
        reference=lambda dtype=REFERENCE_DTYPE: references.layernorm_tail(
            reference_spec(spec, dtype)))


class PackedLSTM(nn.Module):
    """fastrnns' vl_cudnn: pack_sequence(enforce_sorted=False) → nn.LSTM → pad_packed."""

    def __init__(self, lstm: nn.LSTM):
        super().__init__()
        self.lstm = lstm

    def forward(self, sequences: List[Tensor], state: Tuple[Tensor, Tensor]):
        packed = rnn_utils.pack_sequence(sequences, enforce_sorted=False)
        out, final = self.lstm(packed, state)
        padded, _ = rnn_utils.pad_packed_sequence(out)
        return padded, final


def varlen_lstm(spec: WorkloadSpec) -> Workload:
    module = PackedLSTM(native_rnn(spec, "LSTM"))
    sequences, lengths, state = varlen_inputs(spec)
    return module_workload(
        module, (sequences, state),
        lstm_work(spec.shape, elem_bytes(spec.dtype), tokens=int(lengths.sum())),
        backward_seed=spec.seed,
        reference=lambda dtype=REFERENCE_DTYPE: varlen_lstm(reference_spec(spec, dtype)))
