"""Work counts of recurrent layers: FLOPs and minimum bytes moved per iteration.

Conventions (stated so rates can be compared across models):
- a multiply-add is 2 FLOPs; a transcendental (sigmoid, tanh) counts as 1;
- backward FLOPs = 2 × forward GEMM FLOPs (input and weight gradients) + 2 × pointwise;
- minimum bytes: every tensor that must be read or written at least once — parameters,
  inputs, states, outputs; backward also reads the saved gate activations and writes the
  parameter and input gradients.
"""

from __future__ import annotations

from rnnexp.schema import ShapeConfig
from rnnexp.workload import Work

# Pointwise FLOPs per hidden unit per step of one cell, after the gate GEMMs.
# LSTM: 3 adds on 4H gates (12) + 3 sigmoid + 2 tanh (5) + c' = f*c + i*g (3) + h' = o*tanh (1).
LSTM_POINTWISE = 21
# GRU: 2 adds on 3H (6) + 2 sigmoid + 1 tanh (3) + r*h_n, i_n + (2) + h' = n + z*(h - n) (3).
GRU_POINTWISE = 14


def recurrent_work(shape: ShapeConfig, elem_bytes: int, *, gates: int, pointwise: int,
                   states: int, tokens: int | None = None, steps: int | None = None) -> Work:
    """Work of a stacked recurrent layer with `gates` gate blocks and `states` state tensors
    (2 for LSTM's h and c, 1 for GRU). `steps` overrides seq_len (variable-length inputs)."""
    T = steps if steps is not None else shape.seq_len
    B, I, H, L = shape.batch_size, shape.input_size, shape.hidden_size, shape.num_layers
    in_sizes = [I] + [H] * (L - 1)
    gemm = sum(2 * T * B * gates * H * (i + H) for i in in_sizes)
    point = T * L * B * H * pointwise
    params = sum(gates * H * (i + H) + 2 * gates * H for i in in_sizes)
    inputs = T * B * I + states * L * B * H
    outputs = T * B * H + states * L * B * H
    saved = T * L * B * (gates + states - 1) * H  # gate activations and cell states
    return Work(
        flops_fwd=float(gemm + point),
        flops_bwd=float(2 * gemm + 2 * point),
        bytes_fwd=float((params + inputs + outputs) * elem_bytes),
        bytes_bwd=float((2 * params + 2 * inputs + outputs + saved) * elem_bytes),
        tokens=tokens if tokens is not None else T * B,
    )


def lstm_work(shape: ShapeConfig, elem_bytes: int, **kw) -> Work:
    return recurrent_work(shape, elem_bytes, gates=4, pointwise=LSTM_POINTWISE, states=2, **kw)


def gru_work(shape: ShapeConfig, elem_bytes: int, **kw) -> Work:
    return recurrent_work(shape, elem_bytes, gates=3, pointwise=GRU_POINTWISE, states=1, **kw)
