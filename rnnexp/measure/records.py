"""What a measurement's parts report, as results keep them: plain data, no torch — the
analysis commands read results without importing it. The timer (rnnexp.measure.timing),
verification (rnnexp.measure.verify), the phases' memory (rnnexp.measure.phase_memory) and
the profiler (rnnexp.measure.profiling) make them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

# A phase's memory peak, as measured: on a GPU by PyTorch's caching allocator; on the CPU
# the process's resident high-water mark (rnnexp.measure.phase_memory says how).
CUDA_PEAK = "cuda_peak_mb"
RSS_HWM = "rss_hwm_mb"
PREFIX = {"forward": "fwd", "backward": "bwd"}  # MLflow's phase sections


@dataclass
class Samples:
    """Per-sample times in ms; a sample is the mean of `block` back-to-back iterations."""

    forward_ms: list[float] = field(default_factory=list)
    backward_ms: list[float] = field(default_factory=list)
    block: int = 1
    # The interleaved round each sample was taken in (rnnexp.run.interleave); empty when the
    # samples were not taken in a sweep's interleaved rounds.
    rounds: list[int] = field(default_factory=list)

    @property
    def total_ms(self) -> list[float]:
        if not self.backward_ms:
            return list(self.forward_ms)
        return [f + b for f, b in zip(self.forward_ms, self.backward_ms, strict=True)]

    def extend(self, other: Samples) -> None:
        self.forward_ms.extend(other.forward_ms)
        self.backward_ms.extend(other.backward_ms)
        self.rounds.extend(other.rounds)
        self.block = other.block

    def in_round(self, index: int) -> Samples:
        """These samples, tagged as taken in interleaved round `index`."""
        self.rounds = [index] * len(self.forward_ms)
        return self


@dataclass
class Verification:
    status: str  # passed | failed | skipped | unavailable
    max_abs_error: Optional[float] = None  # largest |model − float64| over every tensor
    # The deciding tensor (the failing one, or the one nearest its bound) and its numbers:
    tensor: str = ""
    error: Optional[float] = None  # rms(model − float64)
    # rms(reference − float64): the CPU's reference in the job's dtype; in float32 the
    # larger of it and `cpu_error`'s randomly rounded twin (`rounded_error`).
    reference_error: Optional[float] = None
    multiple: Optional[float] = None  # error / reference_error, as measured
    allowed_multiple: Optional[float] = None  # k
    floor: Optional[float] = None  # eps(dtype) · rms(float64)
    cpu_error: Optional[float] = None  # the CPU's reference (float32 jobs)
    rounded_error: Optional[float] = None  # the randomly rounded reference (float32 jobs)
    # How the low-precision reference computed, when not natively in the job's dtype
    # (rnnexp.machine.emulation: "tf32" or "emulated").
    reference_math: str = ""
    # Absolute tolerances, for models verified that way (quantized) instead of by multiple.
    atol: Optional[float] = None
    rtol: Optional[float] = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class PhaseMemory:
    """A job's peak memory per phase, in MiB above the phase's start; `kind` names what was
    measured (CUDA_PEAK or RSS_HWM), "" with `not_measured` saying why not."""

    kind: str = ""
    forward_mb: Optional[float] = None
    backward_mb: Optional[float] = None
    not_measured: str = ""

    def of(self, phase: str) -> Optional[float]:
        return {"forward": self.forward_mb, "backward": self.backward_mb}.get(phase)

    def metrics(self) -> dict[str, float]:
        """`fwd/<kind>`, `bwd/<kind>`: in the phases' own MLflow sections."""
        return {f"{PREFIX[p]}/{self.kind}": float(v) for p in PREFIX
                if (v := self.of(p)) is not None and self.kind}


@dataclass
class ProfileInfo:
    """What a profile recorded: the trace (relative to the job folder) and the top
    operators by self time, each {name, calls, self_ms, total_ms} per profiled iteration."""

    iters: int = 0
    trace: str = ""
    sorted_by: str = ""
    top_ops: list[dict[str, Any]] = field(default_factory=list)
