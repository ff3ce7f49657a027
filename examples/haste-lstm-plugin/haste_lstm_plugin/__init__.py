"""model=haste_lstm: haste's fused CUDA LSTM (github.com/lmnt-com/haste, `haste_pytorch.LSTM`).

haste computes nn.LSTM's recurrence in its own weight layout, one layer per module:
`kernel` [input_size, 4H] and `recurrent_kernel` [H, 4H] (nn.LSTM's weight_ih and weight_hh
transposed), a single `bias` [4H] (nn.LSTM's bias_ih + bias_hh), gates in the order i, g, f,
o (nn.LSTM's are i, f, g, o) — haste's own `LSTM.from_native_weights`. `to_haste` is that
mapping as a function, so rnnexp gives the kernel nn.LSTM's seeded weights in haste's layout
and verifies its gradients in nn.LSTM's. The kernel runs on CUDA, float32 only
(haste's lstm.cc dispatches float and double).
"""

from __future__ import annotations

import importlib.util
from typing import List, Tuple

import torch
from torch import Tensor, nn

from rnnexp.config.kernel_plugins import Kernel

NOT_INSTALLED = ("haste_pytorch is not installed (haste builds with CUDA only: "
                 "pip install haste_pytorch on a machine with a CUDA toolkit)")


def igfo(w: Tensor) -> Tensor:
    """nn.LSTM's gate blocks i, f, g, o (last dimension) in haste's order i, g, f, o."""
    i, f, g, o = w.chunk(4, -1)
    return torch.cat([i, g, f, o], -1)


def to_haste(weights: List[Tensor]) -> List[Tensor]:
    """nn.LSTM's (weight_ih, weight_hh, bias_ih, bias_hh) per layer → haste's
    (kernel, recurrent_kernel, bias) per layer. Differentiable: rnnexp maps gradients back
    through it."""
    out: List[Tensor] = []
    for layer in range(len(weights) // 4):
        w_ih, w_hh, b_ih, b_hh = weights[4 * layer: 4 * layer + 4]
        out += [igfo(w_ih.t()), igfo(w_hh.t()), igfo(b_ih + b_hh)]
    return out


class HasteLSTM(nn.Module):
    """Stacked haste_pytorch.LSTM layers with nn.LSTM's call:
    forward(x, (h0, c0)) -> (output, (h_n, c_n)), states [num_layers, batch, H]."""

    def __init__(self, haste, weights: List[nn.Parameter]):
        super().__init__()
        layers = []
        for layer in range(len(weights) // 3):
            kernel, recurrent, bias = weights[3 * layer: 3 * layer + 3]
            lstm = haste.LSTM(kernel.shape[0], recurrent.shape[0], forget_bias=0.0)
            # haste's parameters are the ones rnnexp made: its gradients land on them.
            lstm.kernel, lstm.recurrent_kernel, lstm.bias = kernel, recurrent, bias
            layers.append(lstm)
        self.layers = nn.ModuleList(layers)

    def forward(self, x: Tensor, state: Tuple[Tensor, Tensor]):
        h0, c0 = state
        hs, cs = [], []
        for i, lstm in enumerate(self.layers):
            x, (h, c) = lstm(x, (h0[i:i + 1], c0[i:i + 1]))
            hs.append(h[0])
            cs.append(c[0])
        return x, (torch.stack(hs), torch.stack(cs))


def requires() -> str:
    """Why haste cannot run here ("" when it can)."""
    if importlib.util.find_spec("haste_pytorch") is None:
        return NOT_INSTALLED
    if not torch.cuda.is_available():
        return "haste_pytorch's LSTM needs a CUDA GPU and there is none here"
    return ""


def build(spec, weights: List[nn.Parameter]) -> HasteLSTM:
    import haste_pytorch

    return HasteLSTM(haste_pytorch, weights)


KERNEL = Kernel(name="haste_lstm", factory=build, computes="lstm", layout=to_haste,
                devices=("cuda",), backends=("cudnn", "aten"), dtypes=("float32",),
                requires=requires, description="haste_pytorch.LSTM (fused CUDA LSTM)")
