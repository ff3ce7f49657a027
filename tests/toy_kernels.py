"""Kernel plugins for the tests, declared through a real entry point: the tests install
this module with a dist-info (entry_points.txt) on sys.path or PYTHONPATH
(tests/models/test_kernel_plugins.py).

`lstm` is a plain-torch LSTM in nn.LSTM's layout; `wrong` swaps its forget and cell gates;
`gru` is nn.GRU's recurrence; `relaid` keeps its weights in another layout (transposed,
gates i, g, f, o, one bias), as GPU libraries do; GPU needs a library that is not installed;
the last few declarations are each unusable in their own way."""

from __future__ import annotations

import torch

from rnnexp.config.kernel_plugins import Kernel
from rnnexp.models import native


def _stacked(x, state, weights, order=(0, 1, 2, 3)):
    """nn.LSTM's recurrence over per-layer (w_ih, w_hh, b_ih, b_hh); `order` picks which
    gate chunk plays i, f, g, o."""
    h0, c0 = state
    hs, cs = [], []
    for layer in range(len(weights) // 4):
        w_ih, w_hh, b_ih, b_hh = weights[4 * layer: 4 * layer + 4]
        h, c = h0[layer], c0[layer]
        outputs = []
        for x_t in x:
            chunks = (x_t @ w_ih.T + b_ih + h @ w_hh.T + b_hh).chunk(4, 1)
            i, f, g, o = (chunks[k] for k in order)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        x = torch.stack(outputs)
        hs.append(h)
        cs.append(c)
    return x, (torch.stack(hs), torch.stack(cs))


def lstm(spec, weights, scale: float = 1.0):
    return lambda x, state: _stacked(x * scale, state, weights)


def wrong(spec, weights):
    return lambda x, state: _stacked(x, state, weights, order=(0, 2, 1, 3))


def helper(spec, weights):
    """Defined beside the factories but declared by no entry point."""
    return lstm(spec, weights)


def to_relaid(weights):
    """nn.LSTM's layout → [I, 4H], [H, 4H] and one bias per layer, gates i, g, f, o."""
    out = []
    for layer in range(len(weights) // 4):
        w_ih, w_hh, b_ih, b_hh = weights[4 * layer: 4 * layer + 4]

        def igfo(w):
            i, f, g, o = w.chunk(4, -1)
            return torch.cat([i, g, f, o], -1)

        out += [igfo(w_ih.T), igfo(w_hh.T), igfo(b_ih + b_hh)]
    return out


def relaid(spec, weights):
    def forward(x, state):
        native_order = []
        for layer in range(len(weights) // 3):
            k, r, b = weights[3 * layer: 3 * layer + 3]
            native_order += [k.T, r.T, b, torch.zeros_like(b)]
        return _stacked(x, state, native_order, order=(0, 2, 1, 3))
    return forward


def gru(spec, weights):
    """nn.GRU's recurrence over per-layer (w_ih, w_hh, b_ih, b_hh), gates r, z, n."""
    def forward(x, h0):
        finals = []
        for layer in range(len(weights) // 4):
            w_ih, w_hh, b_ih, b_hh = weights[4 * layer: 4 * layer + 4]
            h, outputs = h0[layer], []
            for x_t in x:
                i_r, i_z, i_n = (x_t @ w_ih.T + b_ih).chunk(3, 1)
                h_r, h_z, h_n = (h @ w_hh.T + b_hh).chunk(3, 1)
                r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
                n = torch.tanh(i_n + r * h_n)
                h = (1 - z) * n + z * h
                outputs.append(h)
            x = torch.stack(outputs)
            finals.append(h)
        return x, torch.stack(finals)
    return forward


def needs_toylib(spec, weights):
    raise AssertionError("never built: its plugin says it cannot run here")


def own(spec):
    return native.lstm(spec)


LSTM = Kernel(name="toy_lstm", factory=lstm, computes="lstm", backends=("aten",))
WRONG = Kernel(name="toy_wrong", factory=wrong, computes="lstm")
RELAID = Kernel(name="toy_relaid", factory=relaid, computes="lstm", layout=to_relaid)
GRU = Kernel(name="toy_gru", factory=gru, computes="gru")
OWN = Kernel(name="toy_own", factory=own, computes="lstm", reference="own")
GPU = Kernel(name="toy_gpu", factory=needs_toylib, computes="lstm", devices=("cuda",),
             requires=lambda: "toylib is not installed")
CLASH = Kernel(name="lstm", factory=helper, computes="lstm")
TWICE = Kernel(name="toy_twice", factory=lstm, computes="lstm")
NOT_A_KERNEL = object()
