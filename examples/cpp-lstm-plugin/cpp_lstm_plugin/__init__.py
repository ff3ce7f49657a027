"""model=cpp_lstm: an LSTM written in C++ against ATen (cpp_lstm_plugin/lstm.cpp).

It computes what nn.LSTM computes, from nn.LSTM's weights in nn.LSTM's layout, so rnnexp
gives it the seeded weights, inputs, float64 reference and work counts of its own LSTM
models. Importing this package is cheap: the compiled extension is loaded by the factory.
"""

from __future__ import annotations

from typing import List, Tuple

from torch import Tensor, nn

from rnnexp.config.kernel_plugins import Kernel


class CppLSTM(nn.Module):
    """forward(x, (h0, c0)) -> (output, (h_n, c_n)), as nn.LSTM."""

    def __init__(self, weights: List[nn.Parameter]):
        super().__init__()
        from cpp_lstm_plugin import _C  # the built extension

        self.lstm_forward = _C.lstm_forward
        self.weights = nn.ParameterList(weights)

    def forward(self, x: Tensor, state: Tuple[Tensor, Tensor]):
        out, h, c = self.lstm_forward(x, state[0], state[1], list(self.weights))
        return out, (h, c)


def build(spec, weights: List[nn.Parameter]) -> CppLSTM:
    """rnnexp's factory call: the job's spec and nn.LSTM's seeded parameters."""
    return CppLSTM(weights)


KERNEL = Kernel(name="cpp_lstm", factory=build, computes="lstm",
                description="stacked LSTM in C++ (ATen ops, autograd backward)")
