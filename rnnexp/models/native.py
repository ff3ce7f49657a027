"""PyTorch's own recurrent modules (nn.LSTM); the backend decides which kernels run them."""

from __future__ import annotations

from rnnexp.models.inputs import elem_bytes, native_rnn, reference_spec, sequence_inputs
from rnnexp.models.work import lstm_work
from rnnexp.workload import (
    Workload,
    WorkloadSpec,
    first_output_backward_setup,
    tensor_backward,
)


def lstm(spec: WorkloadSpec, dropout: float = 0.0) -> Workload:
    module = native_rnn(spec, "LSTM", dropout=dropout)
    x, h0, c0 = sequence_inputs(spec)
    return Workload(
        inputs=(x, (h0, c0)),
        params=list(module.parameters()),
        forward=module,
        work=lstm_work(spec.shape, elem_bytes(spec.dtype)),
        backward_setup=first_output_backward_setup(spec.seed),
        backward=tensor_backward,
        modules=(module,),
        reference=lambda: lstm(reference_spec(spec)),
    )
