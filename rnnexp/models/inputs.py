"""Seeded weights and inputs shared by every LSTM/GRU formulation.

Everything is drawn on the CPU in float32 from the seed, then cast and moved, so a model and
its float64 CPU reference hold exactly the same values whatever the device.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import torch
from torch import nn

from rnnexp.models.workload import WorkloadSpec

REFERENCE_DTYPE = torch.float64


def reference_spec(spec: WorkloadSpec, dtype: torch.dtype = REFERENCE_DTYPE) -> WorkloadSpec:
    """The spec of a reference: same sizes and seed, on the CPU, never scripted; float64, or
    the job's dtype for the low-precision reference whose own error sets the tolerance."""
    return replace(spec, device=torch.device("cpu"), dtype=dtype, script=False,
                   requires_grad=True)


def native_rnn(spec: WorkloadSpec, kind: str = "LSTM", dropout: float = 0.0) -> nn.RNNBase:
    """nn.LSTM / nn.GRU with default init under the seed, cast to the spec's device/dtype."""
    cls = {"LSTM": nn.LSTM, "GRU": nn.GRU}[kind]
    s = spec.shape
    torch.manual_seed(spec.seed)
    with warnings.catch_warnings():
        # nn.LSTM warns that dropout acts between layers only, i.e. not at num_layers=1; the
        # README says so for the dropout models, and upstream timed the same configuration.
        warnings.filterwarnings("ignore", message="dropout option adds dropout")
        module = cls(s.input_size, s.hidden_size, s.num_layers, dropout=dropout)
    module.requires_grad_(spec.requires_grad)
    return module.to(device=spec.device, dtype=spec.dtype)


def sequence_inputs(spec: WorkloadSpec, states: int = 2) -> tuple[torch.Tensor, ...]:
    """x [T, B, I] and `states` initial states [L, B, H] (h, c for LSTM; h for GRU)."""
    s = spec.shape
    gen = torch.Generator().manual_seed(spec.seed + 17)
    x = torch.randn(s.seq_len, s.batch_size, s.input_size, generator=gen)
    hs = [torch.randn(s.num_layers, s.batch_size, s.hidden_size, generator=gen)
          for _ in range(states)]
    return tuple(t.to(device=spec.device, dtype=spec.dtype) for t in (x, *hs))


def module_inputs(spec: WorkloadSpec, kind: str) -> tuple:
    """(x, state) as nn.LSTM (state = (h0, c0)) or nn.GRU (state = h0) take them."""
    if kind == "LSTM":
        x, h0, c0 = sequence_inputs(spec, states=2)
        return x, (h0, c0)
    x, h0 = sequence_inputs(spec, states=1)
    return x, h0


def varlen_inputs(spec: WorkloadSpec, states: int = 2
                  ) -> tuple[list[torch.Tensor], torch.Tensor, tuple[torch.Tensor, ...]]:
    """B sequences [len_b, I] with len_b uniform in [min_len, max_len] (both inclusive;
    upstream's randint excluded max_len), the lengths, and `states` initial states [L, B, H]."""
    s = spec.shape
    gen = torch.Generator().manual_seed(spec.seed + 17)
    lengths = torch.randint(s.min_len, s.max_len + 1, (s.batch_size,), generator=gen)
    seqs = [torch.randn(int(n), s.input_size, generator=gen) for n in lengths]
    hs = [torch.randn(s.num_layers, s.batch_size, s.hidden_size, generator=gen)
          for _ in range(states)]
    to = {"device": spec.device, "dtype": spec.dtype}
    return [x.to(**to) for x in seqs], lengths, tuple(h.to(**to) for h in hs)


def detached_params(module: nn.Module, spec: WorkloadSpec) -> list[torch.Tensor]:
    """Copies of a module's parameters in nn.LSTM order (w_ih, w_hh, b_ih, b_hh per layer)."""
    return [p.detach().clone().requires_grad_(spec.requires_grad) for p in module.parameters()]


def elem_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
