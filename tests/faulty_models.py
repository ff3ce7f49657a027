"""Model factories that fail on purpose, named by tests through RNNEXP_TARGETS=tests.

Each takes any options, so it can stand in for any model's factory (model.build._target_)."""

from __future__ import annotations

import torch

from rnnexp.models import native
from rnnexp.models.workload import Workload, WorkloadSpec


def crashing(spec: WorkloadSpec, **options) -> Workload:
    raise ValueError("planted crash in the model factory")


def wrong(spec: WorkloadSpec, **options) -> Workload:
    """nn.LSTM with one weight off by 0.5 after the seeded init: fails verification."""
    workload = native.lstm(spec)
    with torch.no_grad():
        workload.params[0].view(-1)[0] += 0.5
    return workload


def out_of_memory(spec: WorkloadSpec, **options) -> Workload:
    """Asks the allocator for far more than any machine has (a real allocation failure)."""
    torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB
    raise AssertionError("unreachable: the allocation above cannot succeed")
