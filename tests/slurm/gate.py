"""A model factory that waits at a gate, so a test can hold a SLURM task mid-measurement and
act on it (requeue it, cancel its array, stop the tracking server) at a moment it chooses.

Named by the tests through RNNEXP_TARGETS=tests (`model.build._target_=tests.slurm.gate.lstm`).
While `$RNNEXP_TEST_GATES/<seed>` exists, building the model of a job with that seed waits,
having written `<seed>.waiting` (the process id, the SLURM restart count and node) to say so;
once the file is gone it builds nn.LSTM. Jobs of other seeds pass at once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rnnexp.models import native
from rnnexp.models.workload import Workload, WorkloadSpec

GATES_ENV = "RNNEXP_TEST_GATES"


def lstm(spec: WorkloadSpec, **options) -> Workload:
    gates = os.environ.get(GATES_ENV)
    if gates:
        gate = Path(gates) / str(spec.seed)
        if gate.exists():
            (Path(gates) / f"{spec.seed}.waiting").write_text(
                f"{os.getpid()} {os.environ.get('SLURM_RESTART_COUNT', '0')} "
                f"{os.environ.get('SLURMD_NODENAME', '')}\n")
            while gate.exists():
                time.sleep(0.1)
    return native.lstm(spec)
