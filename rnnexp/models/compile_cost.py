"""What a fresh process pays before its first result, what an iteration costs once steady,
and after how many iterations a compiled model has paid for its compilation against
another (the break-even).

Each process builds its workload (weights, inputs; TorchScript backends script it there),
then the backend makes its untimed calls (the first one compiles under inductor; TorchScript's
profiling executor profiles and optimises over its first few) before warm-up and timing. The
first process's numbers are recorded; the break-even needs both sides' and is computed where
both are present (rnnexp.analysis.compare_costs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

NEVER = "never"


@dataclass
class CompileCost:
    """The start-up of one job's first (fresh) process, and its steady iteration."""

    # The backend compiles or scripts the model (TorchScript, inductor).
    compiles: bool = False
    # Building the workload: weights, inputs and, under TorchScript, torch.jit.script.
    build_s: Optional[float] = None
    # Compiling as the compiler reports it: torch.jit.script's wall time (inside build_s);
    # for inductor, dynamo's compile time of the forward and backward graphs (inside the
    # first call). Null where the backend compiles nothing.
    compile_s: Optional[float] = None
    # The first forward(+backward) call's wall time, and every untimed call the backend
    # made before warm-up, the first included.
    first_call_ms: Optional[float] = None
    untimed_calls_ms: list[float] = field(default_factory=list)
    # One iteration once warm: the median of the timed samples (forward+backward, else
    # forward).
    steady_ms: Optional[float] = None

    @property
    def known(self) -> bool:
        return None not in (self.build_s, self.first_call_ms, self.steady_ms)

    @property
    def time_to_first_s(self) -> Optional[float]:
        """From a fresh process's build to its first result."""
        if self.build_s is None or self.first_call_ms is None:
            return None
        return self.build_s + self.first_call_ms / 1e3

    @property
    def overhead_ms(self) -> Optional[float]:
        """What start-up costs beyond steady iterations: the build plus the untimed calls,
        less as many steady iterations (those calls computed results too)."""
        if not self.known:
            return None
        calls = self.untimed_calls_ms or [self.first_call_ms]
        return self.build_s * 1e3 + sum(calls) - len(calls) * self.steady_ms  # type: ignore

    def metrics(self) -> dict[str, float]:
        values = {"build_s": self.build_s, "compile_s": self.compile_s,
                  "first_call_ms": self.first_call_ms, "steady_ms": self.steady_ms,
                  "time_to_first_s": self.time_to_first_s, "overhead_ms": self.overhead_ms}
        return {k: float(v) for k, v in values.items() if v is not None}


@dataclass
class BreakEven:
    """After how many iterations `candidate` (start-up included) has cost less in all than
    `baseline`: 0 from the first, None never (it is not faster per iteration)."""

    iterations: Optional[int]
    candidate_overhead_ms: float
    baseline_overhead_ms: float
    candidate_steady_ms: float
    baseline_steady_ms: float

    def text(self) -> str:
        if self.iterations is None:
            return NEVER + " (slower per iteration)" \
                if self.candidate_steady_ms >= self.baseline_steady_ms else NEVER
        return "from the first" if self.iterations == 0 else f"{self.iterations:,} iterations"


def break_even(candidate: CompileCost, baseline: CompileCost) -> Optional[BreakEven]:
    """The smallest N at which overhead_c + N·steady_c ≤ overhead_b + N·steady_b (None when
    a side's numbers are missing)."""
    if not (candidate.known and baseline.known):
        return None
    oc, ob = candidate.overhead_ms, baseline.overhead_ms
    sc, sb = candidate.steady_ms, baseline.steady_ms
    assert oc is not None and ob is not None and sc is not None and sb is not None
    if oc <= ob and sc <= sb:
        n: Optional[int] = 0
    elif sc >= sb:
        n = None  # never catches up (or falls behind after the start)
    else:
        n = max(0, math.ceil((oc - ob) / (sb - sc)))
    return BreakEven(n, oc, ob, sc, sb)
