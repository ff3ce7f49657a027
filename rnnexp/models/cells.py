"""Recurrent cells for `StackedLoop` (fastrnns' cells.py and custom_lstms.py, as modules).

A cell has `precompute(x_all)` — work hoisted out of the time loop (the input GEMM of the
premul variants) — and `step(x_t, state) -> state`, where `state` is a list: [h, c] for LSTM
cells, [h] for GRU. `state[0]` is the output of the step. Every cell is built from the four
parameters of one nn.LSTM/nn.GRU layer (w_ih, w_hh, b_ih, b_hh), so a loop holds exactly the
weights of the module it is checked against.
"""

from __future__ import annotations

from typing import List, Tuple

import torch
from torch import Tensor, nn

LAYERNORM_EPS = 1e-5  # nn.LayerNorm's default, used by the decomposed LayerNorm too


def lstm_tail(gates: Tensor, c: Tensor) -> Tuple[Tensor, Tensor]:
    """The LSTM pointwise tail: c' = σ(f)c + σ(i)tanh(g); h' = σ(o)tanh(c'); gates i, f, g, o."""
    i, f, g, o = gates.chunk(4, 1)
    i = torch.sigmoid(i)
    f = torch.sigmoid(f)
    g = torch.tanh(g)
    o = torch.sigmoid(o)
    cy = f * c + i * g
    hy = o * torch.tanh(cy)
    return hy, cy


class GatedCell(nn.Module):
    """The four parameters of one nn.LSTM/nn.GRU layer; no work hoisted out of the loop."""

    def __init__(self, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor, b_hh: Tensor):
        super().__init__()
        self.w_ih = nn.Parameter(w_ih)
        self.w_hh = nn.Parameter(w_hh)
        self.b_ih = nn.Parameter(b_ih)
        self.b_hh = nn.Parameter(b_hh)

    def precompute(self, x: Tensor) -> Tensor:
        return x


class LSTMCell(GatedCell):
    """fastrnns `lstm_cell`: both gate GEMMs inside the step."""

    def step(self, x_t: Tensor, state: List[Tensor]) -> List[Tensor]:
        h, c = state[0], state[1]
        gates = torch.mm(x_t, self.w_ih.t()) + torch.mm(h, self.w_hh.t()) + self.b_ih + self.b_hh
        hy, cy = lstm_tail(gates, c)
        return [hy, cy]


class PremulLSTMCell(LSTMCell):
    """fastrnns `premul_lstm_cell`: x·W_ihᵀ for all steps at once (one big GEMM)."""

    def precompute(self, x: Tensor) -> Tensor:
        return torch.matmul(x, self.w_ih.t())

    def step(self, x_t: Tensor, state: List[Tensor]) -> List[Tensor]:
        h, c = state[0], state[1]
        gates = x_t + torch.mm(h, self.w_hh.t()) + self.b_ih + self.b_hh
        hy, cy = lstm_tail(gates, c)
        return [hy, cy]


class PremulBiasLSTMCell(LSTMCell):
    """fastrnns `premul_lstm_cell_no_bias`: b_ih is folded into the up-front input GEMM."""

    def precompute(self, x: Tensor) -> Tensor:
        flat = torch.mm(x.reshape(-1, x.size(2)), self.w_ih.t()) + self.b_ih
        return flat.view(x.size(0), x.size(1), -1)

    def step(self, x_t: Tensor, state: List[Tensor]) -> List[Tensor]:
        h, c = state[0], state[1]
        gates = x_t + torch.mm(h, self.w_hh.t()) + self.b_hh
        hy, cy = lstm_tail(gates, c)
        return [hy, cy]


class GRUCell(GatedCell):
    """fastrnns `gru_cell` (nn.GRU's math): gate order r, z, n; h' = n + z⊙(h − n)."""

    def step(self, x_t: Tensor, state: List[Tensor]) -> List[Tensor]:
        h = state[0]
        gi = torch.mm(x_t, self.w_ih.t()) + self.b_ih
        gh = torch.mm(h, self.w_hh.t()) + self.b_hh
        i_r, i_z, i_n = gi.chunk(3, 1)
        h_r, h_z, h_n = gh.chunk(3, 1)
        r = torch.sigmoid(i_r + h_r)
        z = torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return [n + z * (h - n)]


class DecomposedLayerNorm(nn.Module):
    """custom_lstms' hand-written LayerNorm over the last dim (weight 1, bias 0).

    Upstream divides by the biased std with no eps, which is a different function from
    nn.LayerNorm and divides by zero on a constant row. Here eps is added to the variance
    exactly as nn.LayerNorm does, so the two layer-norm models compute the same function and
    differ only in how it is formulated (separate ops versus one fused kernel).
    """

    def __init__(self, size: int, eps: float = LAYERNORM_EPS, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(size, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return (x - mu) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class LayerNormLSTMCell(nn.Module):
    """custom_lstms `LayerNormLSTMCell`: gates = LN(x·W_ihᵀ) + LN(h·W_hhᵀ); c' is normalised.

    It has no bias parameters (the LayerNorms supply them), so nn.LSTM's b_ih/b_hh are not
    used; its LayerNorm weights and biases are parameters nn.LSTM does not have.
    """

    def __init__(self, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor, b_hh: Tensor,
                 decompose: bool = False):
        super().__init__()
        self.w_ih = nn.Parameter(w_ih)
        self.w_hh = nn.Parameter(w_hh)
        hidden = w_hh.size(1)
        opts = {"device": w_ih.device, "dtype": w_ih.dtype}
        if decompose:
            self.ln_i = DecomposedLayerNorm(4 * hidden, **opts)
            self.ln_h = DecomposedLayerNorm(4 * hidden, **opts)
            self.ln_c = DecomposedLayerNorm(hidden, **opts)
        else:
            self.ln_i = nn.LayerNorm(4 * hidden, eps=LAYERNORM_EPS, **opts)
            self.ln_h = nn.LayerNorm(4 * hidden, eps=LAYERNORM_EPS, **opts)
            self.ln_c = nn.LayerNorm(hidden, eps=LAYERNORM_EPS, **opts)

    def precompute(self, x: Tensor) -> Tensor:
        return x

    def step(self, x_t: Tensor, state: List[Tensor]) -> List[Tensor]:
        h, c = state[0], state[1]
        gates = self.ln_i(torch.mm(x_t, self.w_ih.t())) + self.ln_h(torch.mm(h, self.w_hh.t()))
        i, f, g, o = gates.chunk(4, 1)
        cy = self.ln_c(torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g))
        hy = torch.sigmoid(o) * torch.tanh(cy)
        return [hy, cy]


class DecomposedLayerNormLSTMCell(LayerNormLSTMCell):
    def __init__(self, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor, b_hh: Tensor):
        super().__init__(w_ih, w_hh, b_ih, b_hh, decompose=True)
