"""Work counts of recurrent layers: FLOPs and minimum bytes moved per iteration.

Conventions (stated so rates can be compared across models):
- a multiply-add is 2 FLOPs; a transcendental (sigmoid, tanh) counts as 1;
- backward FLOPs = 2 × forward GEMM FLOPs (input and weight gradients) + 2 × pointwise;
- minimum bytes: every tensor that must be read or written at least once — parameters,
  inputs, states, outputs; backward also reads the saved gate activations and writes the
  parameter and input gradients. Each count is in elements and multiplied by the element
  size exactly once (fastrnns' rnn_eltwise multiplied bytes by the element size again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rnnexp.config.schema import ShapeConfig


@dataclass(frozen=True)
class Work:
    """Work done by one iteration, for rates: FLOPs, minimum bytes moved, tokens."""

    flops_fwd: float
    flops_bwd: float
    bytes_fwd: float
    bytes_bwd: float
    tokens: int

# Pointwise FLOPs per hidden unit per step of one cell, after the gate GEMMs.
# LSTM: 3 adds on 4H gates (12) + 3 sigmoid + 2 tanh (5) + c' = f*c + i*g (3) + h' = o*tanh (1).
LSTM_POINTWISE = 21
# GRU: 2 bias adds on 3H (6) + i_r + h_r, i_z + h_z (2) + 2 sigmoid + 1 tanh (3)
# + r*h_n, i_n + (2) + h' = n + z*(h - n) (3).
GRU_POINTWISE = 16
# LayerNorm per element: mean (1), centre (1), variance (2), scale by 1/σ (1), affine (2).
LAYERNORM_PER_ELEM = 7
# Layer-norm LSTM cell per hidden unit: LN over 4H twice and over H once, one add of the two
# normalised gate blocks (4), the same activations and state update as LSTM (5 + 3 + 1).
LNLSTM_POINTWISE = LAYERNORM_PER_ELEM * (4 + 4 + 1) + 4 + 5 + 3 + 1


def recurrent_work(shape: ShapeConfig, elem_bytes: int, *, gates: int, pointwise: int,
                   states: int, tokens: Optional[int] = None,
                   vector_params: Optional[int] = None) -> Work:
    """Work of a stacked recurrent layer with `gates` gate blocks and `states` state tensors
    (2 for LSTM's h and c, 1 for GRU).

    `tokens` is the number of (sequence, step) pairs actually run — seq_len × batch by
    default, the sum of the sequence lengths for variable-length inputs. `vector_params` is
    the number of non-matrix parameters per layer (default: the two bias vectors).
    """
    N = tokens if tokens is not None else shape.seq_len * shape.batch_size
    B, I, H, L = shape.batch_size, shape.input_size, shape.hidden_size, shape.num_layers
    in_sizes = [I] + [H] * (L - 1)
    vectors = vector_params if vector_params is not None else 2 * gates * H
    gemm = sum(2 * N * gates * H * (i + H) for i in in_sizes)
    point = N * L * H * pointwise
    params = sum(gates * H * (i + H) + vectors for i in in_sizes)
    inputs = N * I + states * L * B * H
    outputs = N * H + states * L * B * H
    saved = N * L * (gates + states - 1) * H  # gate activations and cell states
    return Work(
        flops_fwd=float(gemm + point),
        flops_bwd=float(2 * gemm + 2 * point),
        bytes_fwd=float((params + inputs + outputs) * elem_bytes),
        bytes_bwd=float((2 * params + 2 * inputs + outputs + saved) * elem_bytes),
        tokens=N,
    )


def lstm_work(shape: ShapeConfig, elem_bytes: int, **kw) -> Work:
    return recurrent_work(shape, elem_bytes, gates=4, pointwise=LSTM_POINTWISE, states=2, **kw)


def gru_work(shape: ShapeConfig, elem_bytes: int, **kw) -> Work:
    return recurrent_work(shape, elem_bytes, gates=3, pointwise=GRU_POINTWISE, states=1, **kw)


def layernorm_lstm_work(shape: ShapeConfig, elem_bytes: int, **kw) -> Work:
    """No bias vectors; LayerNorm weight and bias over 4H, 4H and H instead."""
    H = shape.hidden_size
    return recurrent_work(shape, elem_bytes, gates=4, pointwise=LNLSTM_POINTWISE, states=2,
                          vector_params=2 * (4 * H + 4 * H + H), **kw)


def layernorm_tail_work(shape: ShapeConfig, elem_bytes: int) -> Work:
    """fastrnns' cudnn_layernorm lower bound: nn.LSTM plus seq_len × (LN over [B,4H] twice and
    over c_n, [L,B,H], once). Bytes add the LN parameters and the [B,4H] LN input, read once."""
    base = lstm_work(shape, elem_bytes)
    B, H, T, L = shape.batch_size, shape.hidden_size, shape.seq_len, shape.num_layers
    ln_elems = T * B * (4 * H + 4 * H + L * H)
    extra_bytes = (2 * (4 * H + 4 * H + H) + B * 4 * H) * elem_bytes
    return Work(flops_fwd=base.flops_fwd + LAYERNORM_PER_ELEM * ln_elems, flops_bwd=0.0,
                bytes_fwd=base.bytes_fwd + extra_bytes, bytes_bwd=0.0, tokens=base.tokens)


def eltwise_work(batch: float, hidden: float, elem_bytes: int) -> Work:
    """The LSTM pointwise tail on [b, 4h] gates (tensorexpr rnn_eltwise).

    Forward reads input, hx, b_ih, b_hh ([b,4h] each) and cx ([b,h]) and writes hy, cy.
    Backward reads the two output gradients, the saved [b,4h] activations and cx, cy, and
    writes the gradients of the five inputs. Tokens: the b rows.
    """
    bh = batch * hidden
    fwd_elems = (4 * 4 + 1 + 2) * bh
    bwd_elems = (2 + 4 + 2 + 4 * 4 + 1) * bh
    return Work(flops_fwd=float(LSTM_POINTWISE * bh), flops_bwd=float(2 * LSTM_POINTWISE * bh),
                bytes_fwd=float(fwd_elems * elem_bytes), bytes_bwd=float(bwd_elems * elem_bytes),
                tokens=round(batch))


def weight_matrices(shape: ShapeConfig, gates: int) -> int:
    """Elements of the W_ih and W_hh matrices of every layer."""
    H, L = shape.hidden_size, shape.num_layers
    return sum(gates * H * (i + H) for i in [shape.input_size] + [H] * (L - 1))


def quantized_work(shape: ShapeConfig, kind: str, weight_bytes: int) -> Work:
    """Dynamic quantization: float32 activations and biases, weight matrices of
    `weight_bytes` each (1 for qint8, 2 for float16). Forward only."""
    gates, work_fn = (4, lstm_work) if kind == "LSTM" else (3, gru_work)
    base = work_fn(shape, 4)
    saved = weight_matrices(shape, gates) * (4 - weight_bytes)
    return Work(flops_fwd=base.flops_fwd, flops_bwd=0.0, bytes_fwd=base.bytes_fwd - saved,
                bytes_bwd=0.0, tokens=base.tokens)
