"""Plain eager references for models whose math nn.LSTM / nn.GRU do not cover.

Each builds, from a reference spec (on the CPU, same seed; float64, or the job's dtype for
the low-precision reference) the same weights the model under test holds and runs a
straightforward formulation of its math — explicit mean/variance LayerNorm, explicit LSTM
gates — never the model's own modules or kernels. Parameters are listed in the model's
`parameters()` order so gradients compare pairwise.
"""

from __future__ import annotations

from typing import List

import torch
from torch import Tensor

from rnnexp.models.cells import LAYERNORM_EPS
from rnnexp.models.inputs import detached_params, elem_bytes, native_rnn, sequence_inputs
from rnnexp.models.work import layernorm_lstm_work, layernorm_tail_work
from rnnexp.models.workload import Workload, WorkloadSpec, first_output_backward


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + LAYERNORM_EPS) * weight + bias


def _ln_params(size: int, spec: WorkloadSpec) -> List[Tensor]:
    """LayerNorm's initial weight (1) and bias (0), as the models initialise them."""
    opts = {"device": spec.device, "dtype": spec.dtype, "requires_grad": True}
    return [torch.ones(size, **opts), torch.zeros(size, **opts)]


def layernorm_lstm(spec: WorkloadSpec) -> Workload:
    """custom_lstms' layer-norm LSTM: nn.LSTM's seeded W_ih, W_hh (no biases) and LayerNorm
    weight 1 / bias 0 over 4H, 4H and H per layer."""
    weights = detached_params(native_rnn(spec, "LSTM"), spec)
    H = spec.shape.hidden_size
    params: List[Tensor] = []
    for i in range(0, len(weights), 4):
        params += [weights[i], weights[i + 1]]
        for size in (4 * H, 4 * H, H):
            params += _ln_params(size, spec)

    def forward(x: Tensor, state: List[Tensor]):
        h0, c0 = state
        hs, cs = [], []
        for layer in range(len(params) // 8):
            w_ih, w_hh, wi, bi, wh, bh, wc, bc = params[8 * layer: 8 * layer + 8]
            h, c = h0[layer], c0[layer]
            outputs = []
            for x_t in x:
                gates = layer_norm(x_t @ w_ih.T, wi, bi) + layer_norm(h @ w_hh.T, wh, bh)
                i, f, g, o = gates.chunk(4, 1)
                c = layer_norm(torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g), wc, bc)
                h = torch.sigmoid(o) * torch.tanh(c)
                outputs.append(h)
            x = torch.stack(outputs)
            hs.append(h)
            cs.append(c)
        return x, (torch.stack(hs), torch.stack(cs))

    x, h0, c0 = sequence_inputs(spec)
    return Workload(inputs=(x, (h0, c0)), params=params, forward=forward,
                    work=layernorm_lstm_work(spec.shape, elem_bytes(spec.dtype)),
                    **first_output_backward(spec.seed))


def layernorm_tail(spec: WorkloadSpec) -> Workload:
    """fastrnns' cudnn_layernorm: nn.LSTM, then c_n normalised seq_len times (weight 1, bias
    0). The two LayerNorms on a constant input are dead code for the outputs, so the
    reference leaves them out. Forward only."""
    module = native_rnn(spec, "LSTM")
    weight, bias = _ln_params(spec.shape.hidden_size, spec)

    def forward(x: Tensor, state):
        out, (h, c) = module(x, state)
        for _ in range(x.size(0)):
            c = layer_norm(c, weight, bias)
        return out, (h, c)

    x, h0, c0 = sequence_inputs(spec)
    return Workload(inputs=(x, (h0, c0)), params=list(module.parameters()), forward=forward,
                    work=layernorm_tail_work(spec.shape, elem_bytes(spec.dtype)))
